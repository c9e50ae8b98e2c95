// Sign-in with a real OpenID Provider: npm `oidc-provider` runs in this
// process on loopback (its development login and consent pages, driven by
// chromium), a secured three-node cluster (`gavel dev`) whose nodes are
// started with `--oidc-issuer`/`--oidc-audience` (as GAVEL_OIDC_* variables)
// and a standalone `gavel console --oidc-issuer ...`. The provider's ID
// tokens reach the nodes as bearer tokens; a token for another client and
// an expired one (the provider's ID-token TTL set negative while it is
// issued, so nothing waits out the nodes' 30 s of clock skew) are refused
// there with UNAUTHENTICATED. A flood of unauthenticated /oidc/start keeps
// nothing in the console (docs/decisions/0089), a deep link survives the
// sign-in, and a return path to another site is refused.
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { execFile, spawn } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { Agent, createServer, get as httpGet } from "node:http";
import { join } from "node:path";
import { promisify } from "node:util";
import { after, before, test } from "node:test";
import Provider from "oidc-provider";
import { chromium } from "playwright-core";
import { DevCluster, freePort, gavelBin } from "./cluster.mjs";

const execFileAsync = promisify(execFile);
/** The console's client: public, PKCE, the nodes' audience. */
const CONSOLE_CLIENT = "gavel-console";
/** Another application of the same provider: its tokens are not for Gavel. */
const OTHER_CLIENT = "other-app";
/** Where the other clients' codes are sent; the test intercepts it in the browser. */
const OTHER_REDIRECT = "http://127.0.0.1:9/callback";
/** The person: the provider's development login takes any name; the email is `<name>@example.com`. */
const LOGIN = "ada";
const PRINCIPAL = `user:${LOGIN}@example.com`;

let providerServer;
let issuer;
let cluster;
let consoleProcess;
let consoleUrl;
let browser;
/** While set, the provider issues ID tokens already expired (exp two minutes before iat). */
let issueExpired = false;

/** Starts the provider on a free loopback port; the console's redirect URI must be known. */
async function startProvider(consoleOrigin) {
  providerServer = createServer();
  await new Promise((resolveListen) => providerServer.listen(0, "127.0.0.1", resolveListen));
  issuer = `http://127.0.0.1:${providerServer.address().port}`;
  const client = (clientId, redirectUri) => ({
    client_id: clientId,
    token_endpoint_auth_method: "none",
    redirect_uris: [redirectUri],
    grant_types: ["authorization_code"],
    response_types: ["code"],
  });
  const provider = new Provider(issuer, {
    clients: [
      { ...client(CONSOLE_CLIENT, `${consoleOrigin}/oidc/callback`), redirect_uris: [`${consoleOrigin}/oidc/callback`, OTHER_REDIRECT] },
      client(OTHER_CLIENT, OTHER_REDIRECT),
    ],
    findAccount: (_ctx, id) => ({
      accountId: id,
      claims: () => ({ sub: id, email: `${id}@example.com`, email_verified: true }),
    }),
    claims: { openid: ["sub"], email: ["email", "email_verified"] },
    // The scope's claims go into the ID token, which is what the nodes read.
    conformIdTokenClaims: false,
    pkce: { required: () => true, methods: ["S256"] },
    features: { devInteractions: { enabled: true } },
    ttl: { IdToken: () => (issueExpired ? -120 : 600) },
    cookies: { keys: ["browser-test-only"] },
  });
  providerServer.on("request", provider.callback());
}

before(async () => {
  const consolePort = await freePort();
  consoleUrl = `http://127.0.0.1:${consolePort}`;
  await startProvider(consoleUrl);
  cluster = await DevCluster.start({ GAVEL_OIDC_ISSUER: issuer, GAVEL_OIDC_AUDIENCE: CONSOLE_CLIENT });
  await cluster.gavel(["access", "grant", PRINCIPAL, "approver"]);
  const capability = join(cluster.dataDir, "refund.toml");
  writeFileSync(capability, cluster.capabilityFile());
  await cluster.gavel(["capability", "register", capability]);
  consoleProcess = spawn(
    gavelBin,
    [
      "console",
      "--listen",
      `127.0.0.1:${consolePort}`,
      "--endpoints",
      cluster.env.GAVEL_ENDPOINTS,
      "--ca",
      cluster.env.GAVEL_CA,
      "--oidc-issuer",
      issuer,
      "--oidc-client-id",
      CONSOLE_CLIENT,
    ],
    { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, RUST_LOG: "warn" } },
  );
  let output = "";
  await new Promise((resolveReady, reject) => {
    const timer = setTimeout(() => reject(new Error(`gavel console did not start:\n${output}`)), 20_000);
    consoleProcess.stdout.on("data", (chunk) => {
      output += chunk.toString();
      if (output.includes(`gavel console: ${consoleUrl}`)) {
        clearTimeout(timer);
        resolveReady();
      }
    });
    consoleProcess.stderr.on("data", (chunk) => {
      output += chunk.toString();
    });
    consoleProcess.once("exit", (code) => reject(new Error(`gavel console exited (${code}):\n${output}`)));
  });
  browser = await chromium.launch({
    executablePath: "/usr/bin/chromium",
    headless: true,
    args: ["--no-sandbox", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
});

after(async () => {
  await browser?.close();
  if (consoleProcess?.exitCode === null) {
    consoleProcess.kill("SIGTERM");
  }
  await cluster?.stop();
  providerServer?.close();
});

/**
 * A browser context that reaches loopback only: the provider's development
 * pages link a web font, and on a machine without internet access each
 * page's load waited seconds for it.
 */
async function loopbackContext() {
  const context = await browser.newContext();
  await context.route(/^https?:\/\/(?!127\.0\.0\.1[:/])/, (route) => route.abort());
  return context;
}

/** Fills the provider's development login and consent pages. */
async function loginAtProvider(page) {
  await page.waitForSelector("input[name=login]");
  await page.fill("input[name=login]", LOGIN);
  await page.fill("input[name=password]", "any");
  await page.click("button[type=submit]");
  await page.waitForSelector("button:text('Continue')");
  await page.click("button:text('Continue')");
}

/** The resident memory of a process, in KiB (`VmRSS` of /proc). */
function residentKiB(pid) {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  return Number(/^VmRSS:\s+(\d+) kB$/m.exec(status)[1]);
}

/**
 * `total` unauthenticated GETs of `path` over `connections` keep-alive
 * connections, as a stranger would send them; returns how many answers of
 * each kind (status, whether it sends the browser to the provider, whether
 * it sets the sealed sign-in cookie) came back.
 */
async function flood(path, total, connections) {
  const agent = new Agent({ keepAlive: true, maxSockets: connections });
  const kinds = new Map();
  let sent = 0;
  const one = () =>
    new Promise((resolveAnswer, reject) => {
      const request = httpGet(`${consoleUrl}${path}`, { agent, timeout: 10_000 }, (response) => {
        response.resume();
        response.on("end", () => {
          const toProvider = String(response.headers.location ?? "").startsWith(`${issuer}/`);
          const cookie = (response.headers["set-cookie"] ?? []).some((line) => /^gavel_oidc_state=[\w-]{100,};/.test(line));
          resolveAnswer(`${response.statusCode}${toProvider ? " to the provider" : ""}${cookie ? " with the sealed cookie" : ""}`);
        });
      });
      request.on("timeout", () => request.destroy(new Error(`no answer to ${path} within 10 s`)));
      request.on("error", reject);
    });
  const connection = async () => {
    while (sent < total) {
      sent += 1;
      const kind = await one();
      kinds.set(kind, (kinds.get(kind) ?? 0) + 1);
    }
  };
  await Promise.all(Array.from({ length: connections }, connection));
  agent.destroy();
  return Object.fromEntries(kinds);
}

/**
 * Signs in through the provider in a fresh browser context, starting at
 * the console's `path` signed out; returns the context and page once the
 * browser is back at the console, and the callback the provider sent it
 * to with the cookie it carried (to replay).
 */
async function signInFrom(path) {
  const context = await loopbackContext();
  const page = await context.newPage();
  const callback = {};
  page.on("request", (request) => {
    if (request.url().startsWith(`${consoleUrl}/oidc/callback`)) {
      callback.url = request.url();
      callback.headers = request.allHeaders();
    }
  });
  await page.goto(`${consoleUrl}${path}`);
  if (!page.url().startsWith(`${issuer}/`)) {
    await page.click("#oidc-sign-in");
  }
  assert.ok(page.url().startsWith(`${issuer}/`), `at the provider: ${page.url()}`);
  await loginAtProvider(page);
  await page.waitForURL((url) => url.origin === consoleUrl && url.pathname !== "/oidc/callback");
  callback.cookie = (await callback.headers).cookie;
  return { context, page, callback };
}

/** An ID token the provider issues to `clientId`, by the code flow with PKCE in the browser. */
async function providerIdToken(clientId) {
  const context = await loopbackContext();
  const page = await context.newPage();
  let redirected;
  // The provider's redirect to the client is read off the browser's
  // requests (nothing listens at OTHER_REDIRECT).
  context.on("request", (request) => {
    if (request.url().startsWith(OTHER_REDIRECT)) {
      redirected = new URL(request.url());
    }
  });
  const verifier = randomBytes(32).toString("base64url");
  const challenge = createHash("sha256").update(verifier).digest("base64url");
  const query = new URLSearchParams({
    client_id: clientId,
    response_type: "code",
    scope: "openid email",
    redirect_uri: OTHER_REDIRECT,
    state: "s",
    nonce: "n",
    code_challenge: challenge,
    code_challenge_method: "S256",
  });
  await page.goto(`${issuer}/auth?${query}`);
  await loginAtProvider(page);
  for (let waited = 0; redirected === undefined && waited < 10_000; waited += 50) {
    await new Promise((resolveWait) => setTimeout(resolveWait, 50));
  }
  await context.close();
  const code = redirected.searchParams.get("code");
  assert.ok(code, `the provider sent a code: ${redirected}`);
  const response = await fetch(`${issuer}/token`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({
      grant_type: "authorization_code",
      code,
      redirect_uri: OTHER_REDIRECT,
      client_id: clientId,
      code_verifier: verifier,
    }),
  });
  const body = await response.json();
  assert.ok(body.id_token, JSON.stringify(body));
  return body.id_token;
}

/** `gavel access whoami` with `token` as the only credential, straight to the nodes over gRPC. */
async function whoAmIWith(token) {
  const env = { ...process.env, ...cluster.env, GAVEL_TOKEN: token };
  delete env.GAVEL_CERT;
  delete env.GAVEL_KEY;
  try {
    const { stdout } = await execFileAsync(gavelBin, ["access", "whoami", "--json"], { env, timeout: 30_000 });
    return { ok: true, answer: JSON.parse(stdout) };
  } catch (error) {
    return { ok: false, stderr: String(error.stderr) };
  }
}

test("sign-in with code and PKCE lands in the inbox as user:<email>, and deciding works with the provider's token", async () => {
  const context = await loopbackContext();
  const page = await context.newPage();
  await page.goto(`${consoleUrl}/signin`);
  assert.doesNotMatch(await page.textContent("body"), /Development sign-in/);
  await page.click("#oidc-sign-in");
  assert.ok(page.url().startsWith(`${issuer}/`), `at the provider: ${page.url()}`);
  await loginAtProvider(page);
  await page.waitForURL(`${consoleUrl}/inbox`);
  assert.match(await page.textContent(".who"), new RegExp(PRINCIPAL.replace(/\./g, "\\.")));
  assert.doesNotMatch(await page.textContent(".who"), /development sign-in/);
  const cookies = await context.cookies(consoleUrl);
  const session = cookies.find((cookie) => cookie.name === "gavel_session");
  assert.ok(session?.httpOnly && session.sameSite === "Strict", JSON.stringify(cookies));
  assert.ok(session.expires * 1000 <= Date.now() + 600_000 + 5_000, "the session ends no later than the ID token");

  // alice (an agent, with a Gavel token) asks; the person decides through the console.
  const submitted = await cluster.gavel(
    ["exec", "submit", "orders.refund", "--id", `oidc-${Date.now()}`, "--input", '{"order_id":"o-oidc","amount_cents":700}'],
    "user:alice",
  );
  assert.equal(submitted.outcome, "approvalRequired");
  await page.goto(`${consoleUrl}/approvals/${submitted.approval.id}`);
  await page.fill("#comment", "checked with the customer");
  await page.click("button.approve");
  await page.waitForSelector("#approval-status:text('approved')");
  const approval = await cluster.gavel(["approval", "get", submitted.approval.id]);
  assert.deepEqual(approval.decision.approver, { displayName: null, id: `${LOGIN}@example.com`, kind: "user" });

  // Sign-out ends the session.
  await page.click("form[action='/signout'] button");
  await page.waitForURL(`${consoleUrl}/signin`);
  await page.goto(`${consoleUrl}/inbox`);
  await page.waitForURL(`${consoleUrl}/signin`);
  await context.close();
});

test("the nodes accept the provider's token for the console's client and refuse another client's and an expired one", async () => {
  const good = await whoAmIWith(await providerIdToken(CONSOLE_CLIENT));
  assert.ok(good.ok, good.stderr);
  assert.equal(good.answer.principal, PRINCIPAL);

  const otherAudience = await whoAmIWith(await providerIdToken(OTHER_CLIENT));
  assert.equal(otherAudience.ok, false);
  assert.match(otherAudience.stderr, /UNAUTHENTICATED/);
  assert.match(otherAudience.stderr, /OIDC_WRONG_AUDIENCE/);

  issueExpired = true;
  const expiredToken = await providerIdToken(CONSOLE_CLIENT).finally(() => {
    issueExpired = false;
  });
  const expired = await whoAmIWith(expiredToken);
  assert.equal(expired.ok, false);
  assert.match(expired.stderr, /UNAUTHENTICATED/);
  assert.match(expired.stderr, /OIDC_TOKEN_EXPIRED/);
});

test("20,000 unauthenticated /oidc/start requests keep nothing: the console's memory stays flat and a person then signs in through the provider, from an approval's link to that approval", async () => {
  const FLOOD = 20_000;
  // Warm the console's allocator and connections first, so that what is
  // measured is what the flood keeps, not the first requests' setup.
  await flood("/oidc/start", 1_000, 4);
  const before = residentKiB(consoleProcess.pid);
  const started = Date.now();
  const answers = await flood("/oidc/start", FLOOD, 4);
  const seconds = (Date.now() - started) / 1000;
  const after = residentKiB(consoleProcess.pid);
  console.log(
    `flood: ${FLOOD} GET /oidc/start over 4 connections in ${seconds.toFixed(1)} s; ` +
      `console VmRSS ${before} KiB before, ${after} KiB after (+${after - before} KiB)`,
  );
  // Every stranger was sent to the provider: nothing fills, no 429.
  assert.deepEqual(answers, { [`303 to the provider with the sealed cookie`]: FLOOD });
  // The old table kept about 400 B per request (8 MB for these); a console
  // that keeps nothing stays within the allocator's noise.
  assert.ok(after - before < 2_048, `the console grew by ${after - before} KiB during the flood`);

  const submitted = await cluster.gavel(
    ["exec", "submit", "orders.refund", "--id", `deep-${Date.now()}`, "--input", '{"order_id":"o-deep","amount_cents":900}'],
    "user:alice",
  );
  const approvalPath = `/approvals/${submitted.approval.id}`;
  const { context, page, callback } = await signInFrom(approvalPath);
  await page.waitForURL(`${consoleUrl}${approvalPath}`);
  assert.match(await page.textContent(".who"), new RegExp(PRINCIPAL.replace(/\./g, "\\.")));
  await page.waitForSelector("#decide");

  // The same callback again, with the cookie it carried: refused before the
  // code is tried at the provider, and no session.
  assert.ok(callback.url && callback.cookie, JSON.stringify(callback));
  const replay = await fetch(callback.url, { headers: { cookie: callback.cookie }, redirect: "manual" });
  assert.equal(replay.status, 400);
  assert.match(await replay.text(), /OIDC_STATE_INVALID/);
  assert.equal(replay.headers.getSetCookie().filter((line) => line.startsWith("gavel_session=")).length, 0);
  await context.close();
});

test("a return path to another site is refused: the person lands on the inbox after signing in", async () => {
  for (const next of ["//evil.example/x", "https://evil.example"]) {
    const { context, page } = await signInFrom(`/oidc/start?next=${encodeURIComponent(next)}`);
    await page.waitForURL(`${consoleUrl}/inbox`);
    await context.close();
  }
});
