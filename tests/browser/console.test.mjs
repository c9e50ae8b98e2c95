// The console in a real browser: Debian's chromium driven by playwright-core,
// against a real secured three-node cluster (`gavel dev`, whose console is
// the one under test), a real worker (examples/refund-worker) and the gavel
// CLI as the agent (signed in with alice's token).
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { chromium } from "playwright-core";
import { DevCluster, repoRoot } from "./cluster.mjs";

const require = createRequire(import.meta.url);
const axeSource = readFileSync(require.resolve("axe-core/axe.min.js"), "utf8");
const shots = join(repoRoot, "tests/browser/out");
/** The inbox must show a new approval within this long, without a reload. */
const INBOX_UPDATE_MS = 1_000;

let cluster;
let browser;
let serial = 0;

before(async () => {
  execFileSync(join(repoRoot, "tests/browser/install-chromium.sh"), { stdio: "inherit" });
  mkdirSync(shots, { recursive: true });
  cluster = await DevCluster.start();
  const capability = join(cluster.dataDir, "refund.toml");
  writeFileSync(capability, cluster.capabilityFile().replace('type = "human"', 'type = "finance"'));
  await cluster.gavel(["capability", "register", capability]);
  cluster.startWorker();
  browser = await chromium.launch({
    executablePath: "/usr/bin/chromium",
    headless: true,
    args: ["--no-sandbox", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
});

after(async () => {
  await browser?.close();
  await cluster?.stop();
});

/** Counts the context's `/events` requests, from before its first page:
 * `opened` ever, and `open()` the ones still open now (no response body
 * finished, not failed, and their page still open). */
function watchStreams(context) {
  const streams = { opened: 0, live: new Set() };
  streams.open = () => [...streams.live].filter((request) => !request.frame().page().isClosed()).length;
  context.on("request", (request) => {
    if (new URL(request.url()).pathname === "/events") {
      streams.opened += 1;
      streams.live.add(request);
    }
  });
  for (const ended of ["requestfinished", "requestfailed"]) {
    context.on(ended, (request) => streams.live.delete(request));
  }
  return streams;
}

/** A browser context signed in as `principal`, and its page. */
async function signedIn(principal) {
  const context = await browser.newContext({ viewport: { width: 1000, height: 900 } });
  context.streams = watchStreams(context);
  const page = await context.newPage();
  page.errors = [];
  page.on("dialog", (dialog) => {
    page.errors.push(`dialog: ${dialog.message()}`);
    void dialog.dismiss();
  });
  page.on("pageerror", (error) => page.errors.push(`pageerror: ${error.message}`));
  await page.goto(`${cluster.consoleUrl}/signin`);
  assert.match(await page.textContent("body"), /Development sign-in/);
  await devSignIn(page, principal);
  await page.waitForURL(/\/inbox$/);
  return { context, page };
}

/** Fills and sends the development sign-in form of the page it is on. */
async function devSignIn(page, principal) {
  await page.fill("#principal", principal);
  await page.click("button[type=submit]");
}

/** alice (the agent) asks for a refund; returns the pending approval. */
async function requestRefund(input = { order_id: `o-${serial}`, amount_cents: 1250 }) {
  serial += 1;
  const response = await cluster.gavel(
    ["exec", "submit", "orders.refund", "--id", `refund-${serial}-${Date.now()}`, "--input", JSON.stringify(input)],
    "user:alice",
  );
  assert.equal(response.outcome, "approvalRequired");
  return response.approval;
}

/** The CSRF token of the signed-in page (from its sign-out form). */
async function csrfOf(page) {
  return page.getAttribute("form[action='/signout'] input[name=csrf]", "value");
}

/** A form POST from the page's session, as a forger would send it. */
async function post(page, path, form, origin = cluster.consoleUrl) {
  return page.request.post(`${cluster.consoleUrl}${path}`, { form, headers: { Origin: origin }, maxRedirects: 0 });
}

async function axeSeriousViolations(page) {
  // Runtime.evaluate is not subject to the page's CSP, which refuses inline scripts.
  const result = await page.evaluate(`${axeSource}; axe.run(document, { resultTypes: ["violations"] })`);
  return result.violations
    .filter((violation) => violation.impact === "serious" || violation.impact === "critical")
    .map((violation) => `${violation.id}: ${violation.help}`);
}

test("an approver sees a new approval live, approves it, and watches the execution complete", async () => {
  const { context, page } = await signedIn("user:carol");
  await page.evaluate(() => {
    window.notReloaded = true;
  });
  // Let the live stream open before the approval is created.
  await page.waitForTimeout(300);
  const approval = await requestRefund();
  const created = Date.now();
  await page.locator(`[data-approval-id="${approval.id}"]`).waitFor({ timeout: INBOX_UPDATE_MS });
  const appearedAfterMs = Date.now() - created;
  assert.ok(appearedAfterMs <= INBOX_UPDATE_MS, `appeared after ${appearedAfterMs} ms`);
  assert.equal(await page.evaluate(() => window.notReloaded), true, "the inbox updated without a reload");
  await page.screenshot({ path: join(shots, "inbox.png"), fullPage: true });
  assert.deepEqual(await axeSeriousViolations(page), []);

  await page.click(`[data-approval-id="${approval.id}"] a`);
  await page.waitForSelector("#decide");
  assert.equal(await page.textContent("#input-hash"), approval.inputHash);
  assert.equal(await page.getAttribute("#terms-hash", "title"), approval.termsHash);
  assert.match(await page.textContent("#uses"), /One use/);
  await page.screenshot({ path: join(shots, "approval.png"), fullPage: true });
  assert.deepEqual(await axeSeriousViolations(page), []);
  await page.fill("#comment", "customer verified");
  await page.click("button.approve");
  await page.waitForSelector("#approval-status:text('approved')");

  // The requester resumes; the worker runs it; the page follows it live.
  const resumed = await cluster.gavel(["exec", "resume", approval.id, "--wait", "30000"], "user:alice");
  assert.equal(resumed.execution?.state ?? resumed.state, "completed", JSON.stringify(resumed));
  await page.waitForSelector(".execution-state:text('completed')", { timeout: 10_000 });
  assert.match(await page.textContent(".result"), /refunded/);
  await page.click("#execution-heading a");
  await page.waitForSelector("#trail-heading");
  assert.match(await page.textContent("table"), /capability\.completed/);
  await page.screenshot({ path: join(shots, "execution.png"), fullPage: true });
  assert.deepEqual(await axeSeriousViolations(page), []);
  assert.deepEqual(page.errors, []);
  for (const name of ["inbox.png", "approval.png", "execution.png"]) {
    const png = readFileSync(join(shots, name));
    assert.equal(png.subarray(1, 4).toString(), "PNG", `${name} is a PNG`);
  }
  await context.close();
});

test("an approval's link opened signed out ends on that approval after signing in; another site's address ends on the inbox", async () => {
  const approval = await requestRefund();
  const context = await browser.newContext();
  const page = await context.newPage();
  const approvalPath = `/approvals/${approval.id}`;
  await page.goto(`${cluster.consoleUrl}${approvalPath}`);
  const signIn = new URL(page.url());
  assert.equal(signIn.pathname, "/signin");
  assert.equal(signIn.searchParams.get("next"), approvalPath);
  await devSignIn(page, "user:carol");
  await page.waitForURL(`${cluster.consoleUrl}${approvalPath}`);
  await page.waitForSelector("#decide");

  // A sign-in page given another site's address does not carry it on, and
  // a sign-in form forged to carry one lands on the inbox all the same.
  for (const next of ["//evil.example/x", "https://evil.example", "/\\evil.example", "/x\r\nSet-Cookie: x=1"]) {
    const other = await browser.newContext();
    const otherPage = await other.newPage();
    await otherPage.goto(`${cluster.consoleUrl}/signin?next=${encodeURIComponent(next)}`);
    assert.equal(await otherPage.locator("input[name=next]").count(), 0, next);
    await devSignIn(otherPage, "user:carol");
    await otherPage.waitForURL(`${cluster.consoleUrl}/inbox`);
    const forged = await otherPage.request.post(`${cluster.consoleUrl}/signin`, {
      form: { principal: "user:carol", next },
      headers: { Origin: cluster.consoleUrl },
      maxRedirects: 0,
    });
    assert.equal(forged.status(), 303, next);
    assert.equal(forged.headers().location, "/inbox", next);
    await other.close();
  }
  await context.close();
});

test("the requester sees no approve button, and a forged decision is refused by the cluster", async () => {
  const approval = await requestRefund();
  const { context, page } = await signedIn("user:alice");
  await page.goto(`${cluster.consoleUrl}/approvals/${approval.id}`);
  assert.equal(await page.locator("#decide").count(), 0);
  // The page says what the cluster answered (Approval.controls): alice, a
  // submitter, holds no approver grant; the console has no rule of its own.
  assert.match(await page.textContent("#why-not"), /approver grant \(PERMISSION_DENIED\)/);
  const forged = await post(page, `/approvals/${approval.id}/decide`, {
    csrf: await csrfOf(page),
    approval_id: approval.id,
    terms_hash: approval.termsHash,
    decision: "approve",
  });
  assert.equal(forged.status(), 403);
  assert.match(await forged.text(), /PERMISSION_DENIED/);
  await context.close();
});

test("an unrelated change leaves the form alone; of two approvers, the second is told the approval is already decided", async () => {
  const approval = await requestRefund();
  const bob = await signedIn("user:bob-finance");
  const carol = await signedIn("user:carol");
  for (const { page } of [bob, carol]) {
    await page.goto(`${cluster.consoleUrl}/approvals/${approval.id}`);
    await page.waitForSelector("#decide");
  }
  // Another approval is a change event for bob's page too: his page re-reads
  // its live region, finds it unchanged, and keeps the very form he is about
  // to use (replacing it would pull the button out from under his click).
  await bob.page.evaluate(() => {
    document.getElementById("decide").dataset.kept = "yes";
  });
  const reread = bob.page.waitForResponse((response) => new URL(response.url()).searchParams.get("live") === "1");
  await requestRefund();
  await (await reread).finished();
  await bob.page.waitForTimeout(100);
  assert.equal(await bob.page.getAttribute("#decide", "data-kept"), "yes", "an unchanged live region was replaced");

  // carol's page has not caught up (its live re-reads fail), so she still
  // sees the form after bob approves; her decision reaches the cluster,
  // which refuses it because of the approval's state.
  await carol.page.route(
    (url) => url.searchParams.get("live") === "1",
    (route) => route.fulfill({ status: 503, body: "held by the test" }),
  );
  await bob.page.click("button.approve");
  await bob.page.waitForSelector("#approval-status:text('approved')");
  await carol.page.click("button.reject");
  await carol.page.waitForLoadState();
  await carol.page.waitForSelector("#approval-status:text('approved')");
  assert.equal(await bob.page.locator("#refused").count(), 0, "bob's decision was not refused");
  assert.equal(await carol.page.locator("#refused").count(), 1, "carol's decision was refused");
  assert.match(await carol.page.textContent("#refused .code"), /^(FAILED_PRECONDITION|APPROVAL_[A-Z_]+)$/);
  assert.match(await carol.page.textContent("#why-not"), /is approved: nothing is left to decide \(APPROVAL_DECIDED\)/);
  await bob.context.close();
  await carol.context.close();
});

test("an input with markup, right-to-left and zero-width characters renders inert", async () => {
  const hostile = {
    order_id: "o-hostile",
    note: "<script>alert('script')</script>",
    attribute: "\"><img src=x onerror=\"alert('img')\">",
    bidi: "refund \u202Egnp.exe\u202C to \u200Bcustomer\u200D",
  };
  const approval = await requestRefund(hostile);
  const { context, page } = await signedIn("user:carol");
  await page.goto(`${cluster.consoleUrl}/approvals/${approval.id}`);
  const shown = await page.textContent("pre.input");
  assert.ok(shown.includes("<script>alert('script')</script>"), shown);
  assert.ok(shown.includes("onerror=\\\"alert('img')\\\""), shown);
  assert.ok(shown.includes("\u202E") && shown.includes("\u200B"), "the characters are shown, not dropped");
  assert.equal(await page.locator("pre.input script, pre.input img, img").count(), 0);
  await page.waitForTimeout(200);
  assert.deepEqual(page.errors, [], "no dialog opened and no script ran");
  // On a phone-sized screen the page does not scroll sideways.
  await page.setViewportSize({ width: 375, height: 740 });
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `the approval page is ${overflow} px wider than a 375 px screen`);
  await context.close();
});

/** The approval as the cluster holds it now (the dev admin reads it). */
async function approvalNow(id) {
  const got = await cluster.gavel(["approval", "get", id]);
  return got.approval ?? got;
}

test("refused: a POST without the CSRF token, from another origin, or on terms changed since the page loaded", async () => {
  const approval = await requestRefund();
  const { context, page } = await signedIn("user:carol");
  await page.goto(`${cluster.consoleUrl}/approvals/${approval.id}`);
  const csrf = await csrfOf(page);
  const decide = `/approvals/${approval.id}/decide`;
  const form = { approval_id: approval.id, terms_hash: approval.termsHash, decision: "approve" };

  const noToken = await post(page, decide, form);
  assert.equal(noToken.status(), 403);
  assert.match(await noToken.text(), /CSRF_TOKEN_INVALID/);

  const otherOrigin = await post(page, decide, { csrf, ...form }, "http://evil.example");
  assert.equal(otherOrigin.status(), 403);
  assert.match(await otherOrigin.text(), /ORIGIN_REFUSED/);

  // The page's own form, its terms hash changed after the page loaded (as
  // if the terms had changed since): the cluster refuses the decision, and
  // the page says so and shows the terms as they are now.
  await page.evaluate(() => {
    document.querySelector("#decide input[name=terms_hash]").value = "0".repeat(64);
  });
  await page.click("button.approve");
  await page.waitForSelector("#refused");
  assert.equal(await page.textContent("#refused .code"), "APPROVAL_TERMS_CHANGED");
  assert.match(await page.textContent("#refused"), /changed since the page was loaded.*nothing was decided/s);
  assert.equal(await page.getAttribute("#terms-hash", "title"), approval.termsHash, "the current terms are shown");
  assert.ok(
    await page.evaluate(() =>
      Boolean(document.getElementById("terms").compareDocumentPosition(document.getElementById("decide")) & Node.DOCUMENT_POSITION_FOLLOWING),
    ),
    "the terms come before the buttons",
  );
  assert.equal((await approvalNow(approval.id)).status, "pending", "nothing was decided");
  await context.close();
});

test("a decoy page cannot decide another approval", async () => {
  // An id with `/` (the decoy, `z/../../approvals/<target>`) is
  // refused when it is created.
  const target = await requestRefund({ order_id: "o-wire", amount_cents: 990_000 });
  const decoyId = `z/../../approvals/${target.id}`;
  await assert.rejects(
    cluster.gavel(
      ["approval", "standing", "create", "--id", decoyId, "--capability", "orders.refund", "--uses", "1", "--window", "1h",
       "--input", JSON.stringify({ order_id: "o-wire", amount_cents: 990_000 })],
      "user:alice",
    ),
    (error) => /INVALID_ARGUMENT/.test(`${error.stdout}${error.stderr}`),
  );
  // A decoy with a safe id and the same input: its page's form, pointed at
  // the target's address, is refused by the console (the form names the
  // decoy) and, naming the target, by the cluster (the terms hash is the
  // decoy's). The target stays pending.
  const decoy = await requestRefund({ order_id: "o-wire", amount_cents: 990_000 });
  const { context, page } = await signedIn("user:carol");
  await page.goto(`${cluster.consoleUrl}/approvals/${decoy.id}`);
  assert.equal(await page.getAttribute("#decide", "action"), `/approvals/${encodeURIComponent(decoy.id)}/decide`);
  await page.evaluate((id) => {
    document.getElementById("decide").action = `/approvals/${id}/decide`;
  }, target.id);
  await page.click("button.approve");
  await page.waitForSelector(".error");
  assert.match(await page.textContent(".error"), /APPROVAL_ID_MISMATCH/);

  await page.goto(`${cluster.consoleUrl}/approvals/${decoy.id}`);
  await page.evaluate((id) => {
    const form = document.getElementById("decide");
    form.action = `/approvals/${id}/decide`;
    form.querySelector("input[name=approval_id]").value = id;
  }, target.id);
  await page.click("button.approve");
  await page.waitForSelector("#refused");
  assert.equal(await page.textContent("#refused .code"), "APPROVAL_TERMS_CHANGED");
  assert.equal((await approvalNow(target.id)).status, "pending", "the target was not decided");
  assert.equal((await approvalNow(decoy.id)).status, "pending");
  await context.close();
});

/** Waits until `condition()` holds, polling, at most `timeoutMs`. */
async function until(condition, timeoutMs, what) {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    assert.ok(Date.now() < deadline, `timed out waiting for ${what}`);
    await new Promise((resolveWait) => setTimeout(resolveWait, 25));
  }
}

test("ten tabs share one live connection: all load, a decision in the tenth shows live in the inbox", async () => {
  // Nine refunds that differ only in their input, as an approver's
  // notifications would bring them.
  const inputs = Array.from({ length: 9 }, (_, index) => ({ order_id: `o-tabs-${index}`, amount_cents: 1000 + index }));
  const approvals = await Promise.all(inputs.map((input) => requestRefund(input)));
  const { context, page: inbox } = await signedIn("user:carol");
  const { streams } = context;
  // Rows tell the refunds apart: short id, request time, leading input fields.
  for (const [index, approval] of approvals.entries()) {
    const row = inbox.locator(`[data-approval-id="${approval.id}"]`);
    await row.waitFor();
    const text = await row.textContent();
    assert.ok(text.includes(`amount_cents: ${1000 + index}`) && text.includes(`order_id: "o-tabs-${index}"`), text);
    assert.match(text, /Requested\s*\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \((less than a minute|\d+ min) ago\)/);
    assert.equal(await row.locator("code.approval-id").getAttribute("title"), approval.id);
  }
  // Nine approval tabs more, opened at once as from notification links;
  // with a stream per tab the seventh would never load.
  const tabs = await Promise.all(
    approvals.map(async (approval) => {
      const tab = await context.newPage();
      tab.errors = [];
      tab.on("pageerror", (error) => tab.errors.push(`pageerror: ${error.message}`));
      const response = await tab.goto(`${cluster.consoleUrl}/approvals/${approval.id}`, { timeout: 10_000 });
      assert.equal(response.status(), 200);
      await tab.waitForSelector("#decide", { timeout: 5_000 });
      return tab;
    }),
  );
  assert.equal(context.pages().length, 10);
  await until(() => streams.open() === 1, 2_000, "the stream to open");
  await inbox.waitForTimeout(300);
  assert.equal(streams.opened, 1, "one /events request for ten tabs");
  assert.equal(streams.open(), 1);
  assert.equal([...streams.live][0].frame().page(), inbox, "the first tab holds the stream");

  // The tenth tab decides; it shows the decision, and the inbox tab drops
  // the row live, without a reload.
  const tenth = tabs[8];
  await inbox.evaluate(() => {
    window.notReloaded = true;
  });
  await tenth.click("button.approve");
  await tenth.waitForSelector("#approval-status:text('approved')", { timeout: 5_000 });
  await inbox.locator(`[data-approval-id="${approvals[8].id}"]`).waitFor({ state: "detached", timeout: 5_000 });
  assert.equal(await inbox.evaluate(() => window.notReloaded), true, "the inbox updated without a reload");

  // The stream's tab closes: another takes the lock and opens the one
  // stream, and its changes still reach the tabs that stay.
  await inbox.close();
  await until(() => streams.open() === 1 && streams.opened >= 2, 5_000, "another tab to take the stream over");
  await cluster.gavel(["approval", "approve", approvals[0].id, "-y"], "user:bob-finance");
  await tabs[0].waitForSelector("#approval-status:text('approved')", { timeout: 5_000 });
  assert.equal(streams.open(), 1, "still one stream");
  for (const tab of [inbox, ...tabs]) {
    assert.deepEqual(tab.errors, []);
  }
  await context.close();
});

test("a standing approval's terms are on its page before its buttons, and the inbox marks it", async () => {
  const input = { order_id: `o-standing-${Date.now()}`, amount_cents: 1 };
  const created = await cluster.gavel(
    ["approval", "standing", "create", "--capability", "orders.refund", "--uses", "100", "--window", "7d",
     "--bind", "/order_id", "--input", JSON.stringify(input)],
    "user:alice",
  );
  const approval = created.approval ?? created;
  const { context, page } = await signedIn("user:carol");
  const badge = page.locator(`[data-approval-id="${approval.id}"] .badge.standing`);
  await badge.waitFor();
  assert.match(await badge.textContent(), /Standing approval: 100 uses within 7 days/);
  await page.goto(`${cluster.consoleUrl}/approvals/${approval.id}`);
  await page.waitForSelector("#decide");
  const terms = await page.textContent("#terms");
  assert.match(terms, /Standing approval.*up to 100 times within 7 days/s);
  assert.ok(terms.includes(`/order_id = "${input.order_id}"`), terms);
  assert.match(await page.textContent("#uses-spent"), /0 spent, 100 left, of 100/);
  assert.ok(
    await page.evaluate(() =>
      Boolean(document.getElementById("terms").compareDocumentPosition(document.getElementById("decide")) & Node.DOCUMENT_POSITION_FOLLOWING),
    ),
    "the terms come before the buttons",
  );
  assert.deepEqual(await axeSeriousViolations(page), []);
  assert.deepEqual(page.errors, []);
  await context.close();
});

// Last in this file: the policy it sets governs every "finance" approval
// until the test deletes it.
test("finance AND on-call from the console: the first vote meets one factor of two, the second approves", async () => {
  const factors = ["--factor", "finance=1/scope/finance", "--factor", "on-call=1/group/user:carol"];
  await cluster.gavel(["policy", "set", "finance-and-on-call", "--types", "finance", ...factors]);
  try {
    const approval = await requestRefund();
    const bob = await signedIn("user:bob-finance");
    await bob.page.goto(`${cluster.consoleUrl}/approvals/${approval.id}`);
    assert.match(await bob.page.textContent("#quorum"), /finance-and-on-call.*finance 0\/1, on-call 0\/1/s);
    await bob.page.click("button.approve");
    await bob.page.waitForSelector(".votes li");
    assert.equal(await bob.page.textContent("#approval-status"), "pending", "one factor of two decides nothing");
    assert.match(await bob.page.textContent("#quorum"), /finance 1\/1, on-call 0\/1/);
    assert.match(await bob.page.textContent(".votes"), /user:bob-finance: approve \(counts for finance\)/);
    assert.match(await bob.page.textContent("#why-not"), /already voted/);
    // bob withdraws his vote (one WithdrawVote) and votes again.
    await bob.page.click("#withdraw button");
    await bob.page.waitForSelector("#decide");
    assert.equal(await bob.page.locator(".votes li").count(), 0, "the vote was withdrawn");
    assert.match(await bob.page.textContent("#quorum"), /finance 0\/1, on-call 0\/1/);
    await bob.page.click("button.approve");
    await bob.page.waitForSelector("#withdraw");
    assert.match(await bob.page.textContent("#quorum"), /finance 1\/1, on-call 0\/1/);

    // The requester may not vote on its own request.
    const alice = await signedIn("user:alice");
    await alice.page.goto(`${cluster.consoleUrl}/approvals/${approval.id}`);
    assert.equal(await alice.page.locator("#decide").count(), 0);

    // A vote on terms changed since the page loaded is refused, and says so.
    const carol = await signedIn("user:carol");
    await carol.page.goto(`${cluster.consoleUrl}/approvals/${approval.id}`);
    await carol.page.evaluate(() => {
      document.querySelector("#decide input[name=terms_hash]").value = "f".repeat(64);
    });
    await carol.page.click("button.approve");
    await carol.page.waitForSelector("#refused");
    assert.equal(await carol.page.textContent("#refused .code"), "APPROVAL_TERMS_CHANGED");
    assert.match(await carol.page.textContent("#quorum"), /finance 1\/1, on-call 0\/1/, "the vote did not count");
    await carol.page.goto(`${cluster.consoleUrl}/approvals/${approval.id}`);
    await carol.page.click("button.approve");
    await carol.page.waitForSelector("#approval-status:text('approved'), #refused");
    assert.equal(await carol.page.locator("#refused").count(), 0, await carol.page.textContent("main"));
    assert.match(await carol.page.textContent("#quorum"), /finance 1\/1, on-call 1\/1/);
    await carol.page.screenshot({ path: join(shots, "quorum.png"), fullPage: true });
    assert.deepEqual(await axeSeriousViolations(carol.page), []);

    const votes = await cluster.gavel(["approval", "votes", approval.id]);
    const voters = votes.quorum.votes.map((vote) => vote.principal).sort();
    assert.deepEqual(voters, ["user:bob-finance", "user:carol"], JSON.stringify(votes));
    for (const { context, page } of [bob, alice, carol]) {
      assert.deepEqual(page.errors, []);
      await context.close();
    }
  } finally {
    await cluster.gavel(["policy", "delete", "finance-and-on-call"]);
  }
});
