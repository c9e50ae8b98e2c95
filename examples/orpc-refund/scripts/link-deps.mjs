// The example is a workspace of clients/typescript, whose npm install puts
// every dependency in clients/typescript/node_modules. Node resolves imports
// from the importing file's directory upwards, so the example links that
// directory as its own node_modules (once; an existing one is left alone).
import { existsSync, lstatSync, symlinkSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const example = join(dirname(fileURLToPath(import.meta.url)), "..");
const link = join(example, "node_modules");
const present = existsSync(link) || (() => { try { return lstatSync(link).isSymbolicLink(); } catch { return false; } })();
if (!present) {
  symlinkSync(join("..", "..", "clients", "typescript", "node_modules"), link, "dir");
}
