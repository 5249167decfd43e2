// Drives the Microsoft 365 Agents Playground (a Teams client emulator) in headless Chromium.
//
// The Python test starts this script and talks to it one step at a time: one JSON command
// per line on stdin, one JSON reply per line on stdout ({"id", "ok", "result"} or
// {"id", "ok": false, "error", "diagnostics"}). Logs go to stderr.
//
// Selectors come from the Playground's own DOM (0.2.x): the compose box is a Lexical
// editor ([data-lexical-editor]), every chat message has a header
// ([aria-label="Message header"], with [aria-label="Message author"] on the bot's), and a
// bot message holding an Adaptive Card renders it in a .fai-OutputCard. A card is found by
// an element id in its data (every card about a proposal carries `proposal-<tool call
// id>`), or by a text it contains; `which` picks the first or the last (default) of
// several matches, never a position in the chat. The Playground's card renderer does not
// put element ids into the DOM, so the driver reads each rendered card's JSON from the
// Playground's own message props (React) and tags the card's element with the ids it holds
// (`data-e2e-ids`), afresh before every lookup (an update re-renders a card in place).
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
const DEFAULT_TIMEOUT = 60_000; // generous: the suite runs on two busy cores (pytest -n 2)

let browser = null;
let page = null;
let artifacts = process.cwd();
let failures = 0;

const log = (...args) => console.error('[driver]', ...args);

/** Tag every rendered card with the element ids its Adaptive Card JSON holds. */
async function tagCards() {
  await page.evaluate(() => {
    if (window.__e2eTag) return window.__e2eTag();
    const cardOf = (el) => {
      const key = Object.keys(el).find((k) => k.startsWith('__reactFiber$'));
      for (let fiber = key ? el[key] : null, i = 0; fiber && i < 12; fiber = fiber.return, i += 1) {
        const attachments = fiber.memoizedProps?.message?.attachments;
        if (Array.isArray(attachments)) {
          const card = attachments.find((a) => a.contentType === 'application/vnd.microsoft.card.adaptive');
          if (card) return card.content;
        }
      }
      return null;
    };
    const ids = (node, found = []) => {
      if (Array.isArray(node)) node.forEach((n) => ids(n, found));
      else if (node && typeof node === 'object') {
        if (typeof node.id === 'string' && typeof node.type === 'string') found.push(node.id);
        for (const [k, v] of Object.entries(node)) if (k !== 'data') ids(v, found);
      }
      return found;
    };
    window.__e2eTag = () => {
      for (const el of document.querySelectorAll('.fai-OutputCard')) {
        const card = cardOf(el);
        el.dataset.e2eIds = card ? ` ${ids(card).join(' ')} ` : '';
        el.__e2eCard = card;
      }
    };
    return window.__e2eTag();
  });
}

/** Every chat message in order: {author, text, card, ids} (author "me" for the user's own;
 * `ids`: the proposal ids its cards carry, from their `proposal-…` element ids). */
async function messages() {
  await tagCards();
  return page.evaluate(() => {
    window.__e2eTag(); // in the same task as the read below: no card can appear untagged
    return Array.from(document.querySelectorAll('[aria-label="Message header"]')).map((header) => {
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
        ids: Array.from(box.querySelectorAll('.fai-OutputCard'))
          .flatMap((el) => (el.dataset.e2eIds || '').split(' '))
          .filter((id) => id.startsWith('proposal-'))
          .map((id) => id.slice('proposal-'.length)),
      };
    });
  });
}

/** A card by `{cardId}` (an element id it holds) or `{contains}` (a text), `which` one. */
async function cardLocator(spec) {
  const { contains, cardId, which = 'last' } = typeof spec === 'string' ? { contains: spec } : spec;
  await tagCards();
  // The outermost card of a bot message (Action.ShowCard nests further .ac-adaptiveCard).
  let cards = page.locator(cardId ? `.fai-OutputCard[data-e2e-ids~="${cardId}"]` : '.fai-OutputCard');
  if (contains) cards = cards.filter({ hasText: contains });
  return which === 'first' ? cards.first() : cards.last();
}

/**
 * Where, among a card's buttons titled `title`, is the one inside its element `within`:
 * its index in the card JSON's order (which is the rendered order), or -1.
 */
async function indexWithin(card, title, within) {
  return card.evaluate(
    (el, [title, within]) => {
      let index = -1;
      let seen = 0;
      const walk = (node, inside) => {
        if (Array.isArray(node)) return node.forEach((n) => walk(n, inside));
        if (!node || typeof node !== 'object') return;
        const here = inside || node.id === within;
        if (typeof node.type === 'string' && node.type.startsWith('Action.') && node.title === title) {
          if (here && index < 0) index = seen;
          seen += 1;
        }
        for (const [k, v] of Object.entries(node)) if (k !== 'data' && k !== 'card') walk(v, here);
      };
      walk(el.__e2eCard, false);
      return index;
    },
    [title, within],
  );
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
    const card = await cardLocator(opts.card);
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
        if (!list.some((m) => m.author === 'me' && m.text.includes(text))) return null;
        // Every new message that is not the rep's is a reply: on a busy machine the Playground
        // can lay a fast reply out above the message it answers (seen in CI: "start over"
        // answered at once, drawn before it, then waited for in vain).
        const after = list.filter((m) => m.author !== 'me');
        return after.some((m) => m.text.includes(expect)) ? after : null;
      },
      timeout,
      `a reply to ${JSON.stringify(text)} containing ${JSON.stringify(expect)}`,
    );
    return { replies };
  },

  /** Wait until a card (`cardId` / `contains`, `which`) shows `text` (default: just exists). */
  async card({ contains, cardId, which, text = '', timeout = DEFAULT_TIMEOUT }) {
    const spec = { contains, cardId, which };
    await waitUntil(
      async () => {
        const card = await cardLocator(spec);
        if (!(await card.count())) return false;
        return !text || (await card.innerText()).includes(text);
      },
      timeout,
      `a card ${JSON.stringify(spec)} showing ${JSON.stringify(text)}`,
    );
    const card = await cardLocator(spec);
    return { text: await card.innerText(), buttons: await card.getByRole('button').allInnerTexts() };
  },

  /** How many cards hold the element id `cardId` (each copy of a proposal's card does). */
  async countCards({ cardId }) {
    await tagCards();
    return { count: await page.locator(`.fai-OutputCard[data-e2e-ids~="${cardId}"]`).count() };
  },

  /**
   * Click a button of a card (`within`: only inside the card's element with that id, e.g.
   * one row of "my approvals"); `double: true` double-clicks it (two clicks, one gesture).
   */
  async click({ contains, cardId, which, within, button, double = false }) {
    const card = await cardLocator({ contains, cardId, which });
    const buttons = card.getByRole('button', { name: button, exact: true });
    let target = buttons.last();
    if (within) {
      const index = await indexWithin(card, button, within);
      if (index < 0) throw new Error(`no ${JSON.stringify(button)} button inside ${within}`);
      target = buttons.nth(index);
    }
    await target.scrollIntoViewIfNeeded();
    if (double) await target.dblclick();
    else await target.click();
    return {};
  },

  /** Fill a card input found by its label (inputs of an opened Edit…/Reject… card included). */
  async fill({ contains, cardId, which, label, value }) {
    const input = (await cardLocator({ contains, cardId, which })).getByLabel(label).last();
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
  async measure({ contains, cardId, which, buttons = [], labels = [] }) {
    const card = await cardLocator({ contains, cardId, which });
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
      inputs: {},
    };
    for (const name of buttons) {
      const button = card.getByRole('button', { name, exact: true }).last();
      result.buttons[name] = { box: await button.boundingBox(), visible: await button.isVisible() };
    }
    for (const label of labels) {
      const input = card.getByLabel(label).last();
      await input.scrollIntoViewIfNeeded();
      result.inputs[label] = {
        box: await input.boundingBox(),
        visible: await input.isVisible(),
        value: await input.inputValue(),
      };
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
  async fitCard({ contains, cardId, which }) {
    const card = await cardLocator({ contains, cardId, which });
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

  /** `card`: a text the card contains, or `{cardId, contains, which}`. */
  async screenshot({ name, card, fullPage }) {
    return { path: await screenshot(name, { card, fullPage }) };
  },

  async messages() {
    return { messages: await messages() };
  },

  /** The page's HTML, written to `name`.html in the artifacts (for diagnosing selectors). */
  async html({ name }) {
    const file = path.join(artifacts, `${name}.html`);
    writeFileSync(file, await page.content());
    return { path: file };
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
// Let go of stdin too, or its open pipe keeps node running after 'close'.
rl.close();
process.stdin.destroy();
if (browser) await browser.close();
