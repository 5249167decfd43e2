// Drives the Microsoft 365 Agents Playground (a Teams client emulator) in headless Chromium.
//
// The Python test starts this script and talks to it one step at a time: one JSON command
// per line on stdin, one JSON reply per line on stdout ({"id", "ok", "result"} or
// {"id", "ok": false, "error", "diagnostics"}). Logs go to stderr.
//
// Selectors come from the Playground's own DOM (0.2.x): the compose box is a Lexical
// editor ([data-lexical-editor]), every chat message has a header
// ([aria-label="Message header"], with [aria-label="Message author"] on the bot's), and a
// bot message holding an Adaptive Card renders it in a .fai-OutputCard. Cards are found by
// a text they contain (e.g. "Proposal call_…"), never by position alone.
import { chromium } from 'playwright-core';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';

const CHROMIUM_ARGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--disable-dev-shm-usage',
];
const DEFAULT_TIMEOUT = 30_000;

let browser = null;
let page = null;
let artifacts = process.cwd();
let failures = 0;

const log = (...args) => console.error('[driver]', ...args);

/** Every chat message in order: {author, text, card} (author "me" for the user's own). */
async function messages() {
  return page.evaluate(() =>
    Array.from(document.querySelectorAll('[aria-label="Message header"]')).map((header) => {
      const box = header.parentElement;
      const author = header.querySelector('[aria-label="Message author"]');
      const text = Array.from(box.children)
        .filter((child) => child !== header)
        .map((child) => child.innerText)
        .join('\n')
        .trim();
      return {
        author: author ? author.innerText.trim() : 'me',
        text,
        card: Boolean(box.querySelector('.ac-adaptiveCard')),
      };
    }),
  );
}

function cardLocator(contains) {
  // The outermost card of a bot message (Action.ShowCard nests further .ac-adaptiveCard).
  return page.locator('.fai-OutputCard').filter({ hasText: contains }).last();
}

function botMessage(contains) {
  // A chat message is its header's parent; the bot's carry the feedback buttons, if any.
  return page
    .locator('div:has(> [aria-label="Message header"])')
    .filter({ has: page.locator('[aria-label="Message author"]') })
    .filter({ hasText: contains })
    .last();
}

async function chatText() {
  const list = await messages();
  return list.map((m) => `[${m.author}] ${m.text}`).join('\n---\n');
}

async function waitUntil(predicate, timeout, what) {
  const deadline = Date.now() + timeout;
  for (;;) {
    const value = await predicate();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeout} ms waiting for ${what}`);
    await page.waitForTimeout(100);
  }
}

async function screenshot(name, opts = {}) {
  const file = path.join(artifacts, `${name}.png`);
  if (opts.card) {
    const card = cardLocator(opts.card);
    await card.scrollIntoViewIfNeeded();
    await page.screenshot({ path: file });
  } else {
    await page.screenshot({ path: file, fullPage: Boolean(opts.fullPage) });
  }
  return file;
}

const commands = {
  async launch({ url, width = 1280, height = 800, artifactsDir, executablePath }) {
    artifacts = artifactsDir || artifacts;
    mkdirSync(artifacts, { recursive: true });
    browser = await chromium.launch({
      executablePath: executablePath || '/usr/bin/chromium',
      args: CHROMIUM_ARGS,
    });
    const context = await browser.newContext({ viewport: { width, height } });
    context.setDefaultTimeout(DEFAULT_TIMEOUT);
    page = await context.newPage();
    page.on('pageerror', (error) => log('page error:', error.message));
    await page.goto(url, { waitUntil: 'domcontentloaded' });
    await page.locator('[data-lexical-editor="true"]').waitFor();
    // The Playground installs the app when the page opens: wait for the bot's first message.
    await waitUntil(
      async () => (await messages()).some((m) => m.author !== 'me'),
      DEFAULT_TIMEOUT,
      'the bot to greet (conversationUpdate → welcome card)',
    );
    return { messages: await messages() };
  },

  /** Type a message, send it, wait until the bot has replied with `expect` (text) after it. */
  async say({ text, expect = '', timeout = DEFAULT_TIMEOUT }) {
    const before = (await messages()).length;
    const editor = page.locator('[data-lexical-editor="true"]');
    await editor.click();
    await page.keyboard.insertText(text);
    await page.keyboard.press('Enter');
    const replies = await waitUntil(
      async () => {
        const list = (await messages()).slice(before);
        const mine = list.findIndex((m) => m.author === 'me' && m.text.includes(text));
        if (mine < 0) return null;
        const after = list.slice(mine + 1).filter((m) => m.author !== 'me');
        return after.some((m) => m.text.includes(expect)) ? after : null;
      },
      timeout,
      `a reply to ${JSON.stringify(text)} containing ${JSON.stringify(expect)}`,
    );
    return { replies };
  },

  /** Wait until a card containing `contains` shows `text` (default: just exists). */
  async card({ contains, text = '', timeout = DEFAULT_TIMEOUT }) {
    const card = cardLocator(contains);
    await card.waitFor({ timeout });
    if (text) await card.filter({ hasText: text }).waitFor({ timeout });
    return { text: await card.innerText(), buttons: await card.getByRole('button').allInnerTexts() };
  },

  /** Click a button of a card; `double: true` double-clicks it (two clicks, one gesture). */
  async click({ contains, button, double = false }) {
    const target = cardLocator(contains).getByRole('button', { name: button, exact: true }).last();
    await target.scrollIntoViewIfNeeded();
    if (double) await target.dblclick();
    else await target.click();
    return {};
  },

  /** Fill a card input found by its label (inputs of an opened Edit…/Reject… card included). */
  async fill({ contains, label, value }) {
    const input = cardLocator(contains).getByLabel(label).last();
    await input.fill(value);
    return { value: await input.inputValue() };
  },

  async viewport({ width, height }) {
    await page.setViewportSize({ width, height });
    await page.waitForTimeout(300); // let the layout settle
    return { width, height };
  },

  /**
   * Where a card and its buttons are, after scrolling the card into view: the card's box,
   * whether its content overflows it sideways, each button's box and visibility, the
   * viewport, and how wide the whole document is.
   */
  async measure({ contains, buttons = [] }) {
    const card = cardLocator(contains);
    await card.scrollIntoViewIfNeeded();
    const result = {
      viewport: page.viewportSize(),
      card: await card.boundingBox(),
      documentWidth: await page.evaluate(() => document.documentElement.scrollWidth),
      cardOverflow: await card.evaluate((el) => {
        const inner = el.querySelector('.ac-adaptiveCard');
        return inner ? inner.scrollWidth - inner.clientWidth : 0;
      }),
      buttons: {},
    };
    for (const name of buttons) {
      const button = card.getByRole('button', { name, exact: true }).last();
      result.buttons[name] = { box: await button.boundingBox(), visible: await button.isVisible() };
    }
    return result;
  },

  /**
   * Give a card the whole viewport width, as Teams mobile does. The Playground lays its
   * chat out for desktops (a 600 px minimum chat pane, cards in a fixed 450 px panel), so
   * at phone size it would clip every card; this lifts those minimums for the card and its
   * ancestors only, and the Adaptive Cards renderer re-flows the card at phone width.
   * `restoreLayout` undoes it.
   */
  async fitCard({ contains }) {
    const card = cardLocator(contains);
    await card.evaluate((outer) => {
      window.__fitted = window.__fitted || [];
      let el = outer.querySelector('.ac-adaptiveCard') || outer;
      while (el && el !== document.documentElement) {
        window.__fitted.push([el, el.getAttribute('style')]);
        Object.assign(el.style, { minWidth: '0', maxWidth: '100%', width: '100%', boxSizing: 'border-box' });
        el = el.parentElement;
      }
    });
    await page.waitForTimeout(300);
    return {};
  },

  async restoreLayout() {
    await page.evaluate(() => {
      for (const [el, style] of (window.__fitted || []).reverse()) {
        if (style === null) el.removeAttribute('style');
        else el.setAttribute('style', style);
      }
      window.__fitted = [];
    });
    return {};
  },

  async screenshot({ name, card, fullPage }) {
    return { path: await screenshot(name, { card, fullPage }) };
  },

  async messages() {
    return { messages: await messages() };
  },

  /** The Playground's log panel, one entry per line: what it sent the bot and got back. */
  async playgroundLog() {
    const lines = await page.evaluate(() =>
      Array.from(document.querySelectorAll('[contenteditable="true"][spellcheck="false"] > div'))
        .map((line) => line.innerText.replace(/\s+/g, ' ').trim())
        .filter(Boolean),
    );
    return { lines };
  },

  /**
   * Teams' AI features on the latest bot message containing `contains`: the "AI generated"
   * label in its header, the 👍 / 👎 feedback buttons under it, and its citation markers.
   */
  async aiFeatures({ contains }) {
    const box = botMessage(contains);
    await box.waitFor();
    return {
      aiLabel: (await box.locator('[aria-label="Message header"]').innerText()).includes('AI generated'),
      feedbackButtons: await box.locator('.fai-FeedbackButtons').count(),
      text: await box.innerText(),
    };
  },

  /**
   * Give feedback on the latest bot message containing `contains` as a rep does: click 👍 or
   * 👎 under it, type `comment` into the Playground's feedback form, submit, and wait for its
   * thanks (the bot answered the message/submitAction invoke with 200). Screenshots the form
   * filled in (`name`-form) and the thanks (`name`-thanks).
   */
  async feedback({ contains, reaction = 'dislike', comment = '', name = 'feedback' }) {
    const box = botMessage(contains);
    const kind = reaction === 'like' ? 'positive' : 'negative';
    const button = box.locator(`.fai-FeedbackButtons__${kind}FeedbackButton`);
    await button.scrollIntoViewIfNeeded();
    await button.click();
    const dialog = page.getByRole('dialog');
    await dialog.locator('textarea').fill(comment);
    await page.waitForTimeout(300); // the dialog fades in
    await screenshot(`${name}-form`);
    await dialog.getByRole('button', { name: 'Submit', exact: true }).click();
    await dialog.getByText('Thank you!').waitFor();
    const shot = await screenshot(`${name}-thanks`);
    await dialog.getByRole('button', { name: 'Close', exact: true }).click();
    return { screenshot: shot };
  },

  async close() {
    if (browser) await browser.close();
    browser = null;
    return {};
  },
};

async function diagnostics(id) {
  if (!page) return {};
  const result = {};
  try {
    failures += 1;
    result.screenshot = await screenshot(`failure-${failures}-step-${id}`, { fullPage: true });
    const file = path.join(artifacts, `failure-${failures}-step-${id}.html`);
    writeFileSync(file, await page.content());
    result.html = file;
    result.chat = await chatText();
  } catch (error) {
    result.diagnosticsError = String(error);
  }
  return result;
}

const rl = readline.createInterface({ input: process.stdin });
for await (const line of rl) {
  if (!line.trim()) continue;
  let request;
  try {
    request = JSON.parse(line);
  } catch (error) {
    process.stdout.write(`${JSON.stringify({ id: null, ok: false, error: `bad JSON: ${error}` })}\n`);
    continue;
  }
  const { id, cmd, ...args } = request;
  const handler = commands[cmd];
  let reply;
  if (!handler) {
    reply = { id, ok: false, error: `unknown command ${cmd}` };
  } else {
    try {
      reply = { id, ok: true, result: await handler(args) };
    } catch (error) {
      log(`${cmd} failed:`, error.stack || error);
      reply = { id, ok: false, error: String(error.message || error), diagnostics: await diagnostics(id) };
    }
  }
  process.stdout.write(`${JSON.stringify(reply)}\n`);
  if (cmd === 'close') break;
}
if (browser) await browser.close();
