// Debian's Chromium, headless, with a fresh profile. The flags were measured to work on these
// machines (without the background-networking ones Chromium floods the closed network).
// Returns { context, page, close }; close() also deletes the profile.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

export async function launchChromium(options = {}) {
  const profile = mkdtempSync(join(tmpdir(), 'inferno-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    ...options,
  });
  const page = context.pages()[0] || (await context.newPage());
  const close = async () => {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  };
  return { context, page, close };
}

/// Counts, in `window.__updates`, the changes of the chat page's last assistant message before it
/// is marked done: more than one means the reply streamed.
export async function countReplyUpdates(page) {
  await page.evaluate(() => {
    window.__updates = 0;
    new MutationObserver(() => {
      const last = [...document.querySelectorAll('.msg.assistant')].pop();
      if (last && !last.dataset.done && last.textContent) window.__updates++;
    }).observe(document.getElementById('chat'), { subtree: true, childList: true, characterData: true });
  });
}
