// The orpc-agent strings of actor kinds, risks and side effects, and their
// gavel.v1 enum values.
import { ActorKind as PbActorKind, Risk as PbRisk, SideEffect as PbSideEffect } from "@gavel/client";
import type { ActorKind, Risk, SideEffect } from "./types.js";

export const ACTOR_KINDS: Record<ActorKind, PbActorKind> = {
  user: PbActorKind.USER,
  service: PbActorKind.SERVICE,
  automation: PbActorKind.AUTOMATION,
  anonymous: PbActorKind.ANONYMOUS,
};
export const RISKS: Record<Risk, PbRisk> = {
  low: PbRisk.LOW,
  medium: PbRisk.MEDIUM,
  high: PbRisk.HIGH,
  critical: PbRisk.CRITICAL,
};
export const SIDE_EFFECTS: Record<SideEffect, PbSideEffect> = {
  none: PbSideEffect.NONE,
  read: PbSideEffect.READ,
  write: PbSideEffect.WRITE,
  destructive: PbSideEffect.DESTRUCTIVE,
  external: PbSideEffect.EXTERNAL,
};
