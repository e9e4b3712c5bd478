// The web console of `nexo serve`, driven in Debian's chromium by
// playwright-core. host/tests/console.rs starts the server, makes the scene
// (alice's run suspended at a write approval, bob's run of text-stats) and
// runs this with:
//
//   NEXO_CONSOLE_URL   the server, http://127.0.0.1:PORT
//   NEXO_ALICE_KEY     alice's key; NEXO_BOB_KEY bob's; NEXO_ADMIN_KEY an admin key
//   NEXO_RUN_ID        alice's suspended run; NEXO_BOB_RUN_ID bob's run;
//                      NEXO_BOB_SESSION_ID a session of bob's
//   NEXO_SCREENSHOTS   where the screenshots go (under target/)
//   NEXO_CHROMIUM      the browser (default /usr/bin/chromium)
//
// Playwright makes the browser's profile in a fresh directory under TMPDIR,
// which the Rust side sets. Plain node:assert; exits non-zero on the first
// failure.
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

function env(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set (host/tests/console.rs sets it)`);
  return value;
}

const base = env('NEXO_CONSOLE_URL');
const aliceKey = env('NEXO_ALICE_KEY');
const bobKey = env('NEXO_BOB_KEY');
const adminKey = env('NEXO_ADMIN_KEY');
const runId = env('NEXO_RUN_ID');
const bobRunId = env('NEXO_BOB_RUN_ID');
const bobSession = env('NEXO_BOB_SESSION_ID');
const shots = env('NEXO_SCREENSHOTS');
const executablePath = process.env.NEXO_CHROMIUM || '/usr/bin/chromium';
mkdirSync(shots, { recursive: true });

const started = Date.now();
const step = (what) => console.log(`[${((Date.now() - started) / 1000).toFixed(1)} s] ${what}`);
const shot = async (page, name) => {
  await page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
  step(`screenshot ${name}.png`);
};

/** Signs in on a fresh page of `context`; answers the page, on /runs. */
async function signIn(context, key) {
  const page = await context.newPage();
  const problems = [];
  // A 404 page logs "Failed to load resource"; that one is expected where it happens.
  page.on('console', (m) => {
    if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) problems.push(m.text());
  });
  page.on('pageerror', (e) => problems.push(String(e)));
  page.on('dialog', (d) => {
    problems.push(`a dialog opened: ${d.message()}`);
    d.dismiss();
  });
  page.problems = problems;
  const first = await page.goto(`${base}/`);
  assert.equal(first.status(), 200);
  assert.equal(new URL(page.url()).pathname, '/login', 'an unauthenticated visit goes to /login');
  await page.fill('#key', key);
  await Promise.all([page.waitForURL(`${base}/runs`), page.click('button[type=submit]')]);
  return page;
}

const browser = await chromium.launch({
  executablePath,
  headless: true,
  timeout: 60_000,
  // Playwright passes --user-data-dir itself (a fresh directory under TMPDIR).
  args: [
    '--headless',
    '--no-sandbox',
    '--disable-gpu',
    '--disable-quic',
    '--no-first-run',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
  ],
});
step(`chromium ${browser.version()} started`);

try {
  // ---- alice ----
  const alice = await browser.newContext({ viewport: { width: 1200, height: 800 } });
  alice.setDefaultTimeout(30_000);

  // A wrong key is refused, on the sign-in page, with no session.
  {
    const page = await alice.newPage();
    await page.goto(`${base}/login`);
    await page.fill('#key', 'nexo_sk_not_a_key');
    await page.click('button[type=submit]');
    await page.waitForSelector('#notice');
    assert.match(await page.textContent('#notice'), /not known here/);
    await page.fill('#key', adminKey);
    await page.click('button[type=submit]');
    await page.waitForSelector('#notice:has-text("admin key")');
    assert.ok(!(await alice.cookies()).some((c) => c.name === 'nexo_session'), 'no session for a refused key');
    await page.close();
    step('a wrong key and an admin key are refused');
  }

  const page = await signIn(alice, aliceKey);
  assert.equal(await page.textContent('#tenant'), 'alice');
  const row = page.locator(`tr[data-run="${runId}"]`);
  await row.waitFor();
  assert.equal((await row.locator('.status').textContent()).trim(), 'suspended');
  assert.ok(!(await page.content()).includes(bobRunId), "bob's run is not in alice's list");
  await shot(page, '1-alice-runs');
  step('alice signed in and sees her run, suspended');

  // The session cookie: HttpOnly, SameSite=Strict, for the whole site, not Secure over plain http.
  const cookies = await alice.cookies();
  const session = cookies.find((c) => c.name === 'nexo_session');
  assert.ok(session, `a session cookie: ${JSON.stringify(cookies)}`);
  assert.equal(session.httpOnly, true);
  assert.equal(session.sameSite, 'Strict');
  assert.equal(session.path, '/');
  assert.equal(session.secure, false);
  assert.match(session.value, /^[0-9a-f]{64}$/, '256 random bits');
  assert.ok(!session.value.includes(aliceKey) && !JSON.stringify(cookies).includes(aliceKey), 'the key is in no cookie');
  assert.equal(await page.evaluate(() => document.cookie), '', 'scripts cannot read the session');

  // The run page: input, status, the approval with its arguments.
  const response = await Promise.all([page.waitForNavigation(), row.locator('a').click()]).then(([r]) => r);
  assert.equal(new URL(page.url()).pathname, `/runs/${runId}`);
  const headers = response.headers();
  assert.match(headers['content-security-policy'], /^default-src 'self'; frame-ancestors 'none'/);
  assert.equal(headers['x-content-type-options'], 'nosniff');
  assert.equal(headers['referrer-policy'], 'same-origin');
  assert.equal(await page.textContent('#run-input'), 'prompt write notes');
  assert.equal(await page.textContent('#run-status'), 'suspended');
  const approval = page.locator('section.approval');
  await approval.waitFor();
  assert.equal(await approval.locator('.approval-tool').textContent(), 'write-file');
  assert.equal(await approval.locator('.approval-capability').textContent(), 'write');
  const args = JSON.parse(await approval.locator('.approval-arguments').textContent());
  assert.equal(args.path, 'notes.txt', JSON.stringify(args));
  assert.match(await approval.locator('.approval-arguments').textContent(), /\n {2}"path": "notes.txt"/, 'pretty JSON');
  await page.waitForSelector('#events li[data-event]');
  assert.ok((await page.locator('#events li[data-event] .kind').allTextContents()).includes('suspended'));
  await shot(page, '2-alice-run-suspended');
  step('the run page shows the approval with notes.txt');

  // The approvals page lists it too, with its buttons.
  await page.goto(`${base}/approvals`);
  const listed = page.locator(`#approvals section.approval[data-run="${runId}"]`);
  assert.match(await listed.locator('.approval-arguments').textContent(), /notes\.txt/);
  assert.equal(await listed.locator('button').allTextContents().then((b) => b.join(',')), 'Approve,Deny');
  await shot(page, '2b-alice-approvals');
  await page.goto(`${base}/runs/${runId}`);

  // CSRF: a POST without the token, with a wrong one, or from another origin, is 403 and changes nothing.
  const token = await page.getAttribute(`form[action="/runs/${runId}/deny"] input[name=csrf]`, 'value');
  assert.match(token, /^[0-9a-f]{64}$/);
  const deny = `${base}/runs/${runId}/deny`;
  for (const [what, options] of [
    ['no token', { form: {} }],
    ['no body', {}],
    ['a wrong token', { form: { csrf: '0'.repeat(64) } }],
    ['another origin', { form: { csrf: token }, headers: { origin: 'http://evil.example' } }],
  ]) {
    const r = await page.request.post(deny, { ...options, maxRedirects: 0 });
    assert.equal(r.status(), 403, `a deny with ${what}`);
  }
  const still = await page.request.get(`${base}/runs/${runId}/state`);
  assert.match(await still.text(), /id="run-status"[^>]*>suspended</, 'the refused posts decided nothing');
  step('posts without the CSRF token (or from another origin) are 403');

  // Approve: the page follows the run to `done` by itself.
  let navigations = 0;
  page.on('framenavigated', (f) => f === page.mainFrame() && navigations++);
  await Promise.all([page.waitForNavigation({ waitUntil: 'load' }), approval.locator('button.approve').click()]);
  assert.equal(new URL(page.url()).pathname, `/runs/${runId}`, 'a decision returns to the run');
  const afterClick = navigations;
  const shownFirst = await page.textContent('#run-status');
  assert.notEqual(shownFirst, 'done', 'the model answers late, so the page first shows the run under way');
  await page.waitForSelector('#run-status:text-is("done")', { timeout: 90_000 });
  assert.equal(navigations, afterClick, 'the status changed in place, with no reload');
  assert.equal(await page.textContent('#run-result'), 'done writing');
  assert.equal(await page.locator('section.approval').count(), 0, 'nothing pending any more');
  // The status and the event list follow the run on their own: the `done`
  // event may arrive a moment after the status says so.
  await page.waitForSelector('#events li[data-event] .kind:text-is("done")', { timeout: 30_000 });
  assert.equal(navigations, afterClick, 'the events were appended in place, with no reload');
  const kinds = await page.locator('#events li[data-event] .kind').allTextContents();
  assert.ok(kinds.includes('tool_call') && kinds.includes('done'), `events appended live: ${kinds}`);
  assert.match(await page.textContent('#events'), /"name":"write_file","summary":"wrote 13 bytes to notes.txt"[^}]*"verdict":"allowed"/);
  await shot(page, '3-alice-run-done');
  step(`approved: the page went ${shownFirst} → done by itself (${kinds.length} events)`);

  // The timeline, drawn as the page loads: both passes with the approval
  // wait between them, each turn, and each call opening to its full
  // arguments and result; the bars placed by time.
  await page.reload();
  const timeline = page.locator('#timeline');
  await timeline.waitFor();
  assert.equal(await timeline.locator('li[data-kind="pass"]').count(), 2, 'two passes');
  assert.equal(await timeline.locator('li[data-kind="turn"]').count(), 2, 'two model turns');
  assert.match(await timeline.locator('li[data-kind="turn"]').first().textContent(), /10 in \/ 5 out tokens · tool_use/);
  const wait = timeline.locator('li[data-kind="wait"]', { hasText: 'Waiting for approval' });
  assert.match(await wait.textContent(), /write-file · approved/);
  const passBars = await timeline.locator('li[data-kind="pass"] rect').evaluateAll((rs) =>
    rs.map((r) => r.getBoundingClientRect()).map((b) => ({ x: b.x, width: b.width })),
  );
  const waitBar = await wait.locator('rect').evaluate((r) => r.getBoundingClientRect().x);
  assert.ok(passBars.every((b) => b.width > 0), `bars with a width: ${JSON.stringify(passBars)}`);
  assert.ok(passBars[0].x < waitBar && waitBar < passBars[1].x, `pass, wait, pass from left to right: ${JSON.stringify(passBars)} ${waitBar}`);
  const call = (name) =>
    timeline.locator('li[data-kind="tool_call"]').filter({ has: page.locator('summary .tl-label', { hasText: name }) });
  const write = call(/^write_file · /);
  assert.equal(await write.count(), 1, 'the write, once: the pass that ran it');
  assert.equal(await write.locator('.tl-arguments').isVisible(), false, 'folded until opened');
  await write.locator('summary').click();
  assert.deepEqual(JSON.parse(await write.locator('.tl-arguments').textContent()), { content: 'hi from alice', path: 'notes.txt' });
  assert.match(await write.locator('.tl-result').textContent(), /notes\.txt/);
  // The tool named with markup: text on the page, and nothing ran.
  const evil = call(/^<script>alert\(1\)<\/script> · /);
  assert.ok((await evil.count()) >= 1, 'the call with markup for a name is listed');
  await evil.first().locator('summary').click();
  assert.match(await evil.first().locator('.tl-arguments').textContent(), /<script>alert\(2\)<\/script>/);
  assert.match(await evil.first().locator('.tl-result').textContent(), /no tool/);
  assert.equal(await page.locator('#timeline script').count(), 0, 'no element made of a tool call');
  assert.deepEqual(page.problems, [], 'nothing ran: no dialog, no error');
  await shot(page, '3c-alice-run-timeline');
  step('the timeline: two passes, the approval wait between them, each call opening to its arguments and result');

  // Usage: a chart and the totals.
  await page.goto(`${base}/usage`);
  assert.equal(await page.textContent('#total-runs'), '1');
  assert.equal(await page.locator('#runs-chart rect.bar').count(), 1, 'one busy hour');
  await shot(page, '4-alice-usage');
  await page.goto(`${base}/sessions`);
  assert.match(await page.textContent('#sessions'), /No sessions yet/);
  assert.ok(!(await page.content()).includes(bobSession), "bob's session is not in alice's list");
  assert.equal((await page.goto(`${base}/sessions/${bobSession}`)).status(), 404, "bob's session, for alice");
  await page.goto(`${base}/approvals`);
  assert.match(await page.textContent('#approvals'), /Nothing is waiting/);
  assert.deepEqual(page.problems, [], 'no script errors, CSP violations or dialogs');
  step('usage, sessions and approvals pages');

  // Sign out: the session is gone on the server, not just in this browser.
  const old = (await alice.cookies()).find((c) => c.name === 'nexo_session').value;
  await Promise.all([page.waitForURL(/\/login\?why=signed-out$/), page.click('header form button')]);
  const replay = await fetch(`${base}/runs`, { headers: { cookie: `nexo_session=${old}` }, redirect: 'manual' });
  assert.equal(replay.status, 303);
  assert.match(replay.headers.get('location'), /^\/login/);
  step('signed out; the old cookie no longer works');

  // ---- bob ----
  const bob = await browser.newContext({ viewport: { width: 1200, height: 800 } });
  bob.setDefaultTimeout(30_000);
  const bobPage = await signIn(bob, bobKey);
  assert.equal(await bobPage.textContent('#tenant'), 'bob');
  await bobPage.locator(`tr[data-run="${bobRunId}"]`).waitFor();
  const list = await bobPage.content();
  assert.ok(!list.includes(runId), "alice's run is not in bob's list");
  await shot(bobPage, '5-bob-runs');
  // Bob's session: listed, with its prompt and thread.
  await bobPage.goto(`${base}/sessions`);
  await Promise.all([bobPage.waitForNavigation(), bobPage.click(`tr[data-session="${bobSession}"] a`)]);
  assert.equal(await bobPage.textContent('#session-instance'), 'bob-notes');
  assert.match(await bobPage.textContent('main'), /one two three/);
  await shot(bobPage, '5b-bob-session');
  // Bob's run's input is markup, shown as text: it runs no script.
  await bobPage.goto(`${base}/runs/${bobRunId}`);
  const input = await bobPage.textContent('#run-input');
  assert.match(input, /<img src=x onerror=alert\(1\)>/);
  assert.equal(await bobPage.locator('#run-input img').count(), 0);
  await shot(bobPage, '6-bob-run');
  // Every route of alice's run answers 404 to bob.
  for (const path of [`/runs/${runId}`, `/runs/${runId}/state`, `/runs/${runId}/events?after=0`]) {
    const r = await bobPage.goto(`${base}${path}`);
    assert.equal(r.status(), 404, `${path} as bob`);
    assert.ok(!(await bobPage.content()).includes('notes.txt'), `${path} shows nothing of alice's`);
  }
  const bobToken = await bobPage.getAttribute('header form input[name=csrf]', 'value');
  for (const verb of ['approve', 'deny']) {
    const r = await bobPage.request.post(`${base}/runs/${runId}/${verb}`, { form: { csrf: bobToken }, maxRedirects: 0 });
    assert.equal(r.status(), 404, `${verb} of alice's run as bob`);
  }
  await shot(bobPage, '7-bob-404');
  assert.deepEqual(bobPage.problems, [], 'no script errors, CSP violations or dialogs');
  step("bob sees none of alice's run: 404 everywhere");
} finally {
  await browser.close();
}
step('all passed');
