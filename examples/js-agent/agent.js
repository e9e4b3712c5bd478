// A nexo agent written in JavaScript, built with ComponentizeJS against wit/.
//
// `run` surveys the agent's workspace through the host's tools (`glob`, then
// `read-file` for each file), logs what it did, and then asks the model (the
// host's `prompt` import) to answer the task with that survey in hand. With no
// model configured it returns the survey alone, so it also runs offline
// without a script. It is the JavaScript twin of examples/python-agent.
//
// Build (see README.md):
//   componentize-js agent.js --wit wit --world-name agent-plugin -d http -d fetch-event -o js_agent.wasm

import { log } from 'nexo:plugin/log@0.1.4';
import { glob, readFile } from 'nexo:plugin/tools@0.1.4';
import { prompt } from 'nexo:plugin/model@0.1.4';

// Files read per run, and characters of each file quoted to the model.
const MAX_FILES = 20;
const QUOTE_CHARS = 2000;

// A failed import throws an error whose `payload` is the WIT error variant,
// `{ tag: 'not-found', val: '…' }`.
const describe = (variant) => `${variant.tag}: ${variant.val}`;

// An export's `result` error is thrown as the variant itself. Anything else
// thrown (an `Error`) is not a `run-error`, and the component traps.
const fail = (message) => ({ tag: 'failed', val: message });

export const agent = {
  // Must not call the host: `nexo inspect` reads it. `option` fields may be
  // left out; enums are their WIT names as strings.
  manifest() {
    return {
      name: 'js-agent',
      description: 'Surveys its workspace with glob and read-file, then answers with the model',
      instructions: 'Answer the task using the workspace survey you are given; cite file paths.',
      skills: [],
      capabilities: ['read', 'glob'],
      fetchAllow: [],
      mcpServers: [],
      maxTurns: 4,
      permissions: 'read-only',
    };
  },

  run(input) {
    if (!input.trim()) throw fail('the input is empty: say what to do with the workspace');
    let paths;
    try {
      paths = glob('**/*');
    } catch (e) {
      throw fail(`glob was refused (${describe(e.payload)})`);
    }

    const rows = [];
    const quotes = [];
    let totalLines = 0;
    let totalWords = 0;
    for (const path of paths.slice(0, MAX_FILES)) {
      let text;
      try {
        text = readFile(path);
      } catch (e) {
        if (e.payload.tag === 'not-found') continue; // a directory, or gone since the glob
        rows.push(`- ${path}: unreadable (${describe(e.payload)})`);
        continue;
      }
      const lines = text.split('\n');
      if (lines.at(-1) === '') lines.pop();
      const words = text.split(/\s+/).filter(Boolean).length;
      totalLines += lines.length;
      totalWords += words;
      const title = (lines.find((l) => l.trim()) ?? '').replace(/^[#\s]+/, '').trim();
      rows.push(`- ${path}: ${lines.length} lines, ${words} words; first line: '${title}'`);
      quotes.push(`--- ${path}\n${text.slice(0, QUOTE_CHARS)}`);
    }

    const survey = [`${rows.length} files, ${totalLines} lines, ${totalWords} words (javascript)`, ...rows].join('\n');
    log('info', `surveyed ${paths.length} paths, read ${quotes.length} files`);

    let reply;
    try {
      reply = prompt(`${input}\n\nWorkspace survey:\n${survey}\n\n${quotes.join('\n')}`);
    } catch (e) {
      if (e.payload.tag === 'not-configured') {
        log('warn', 'no model configured; answering with the survey alone');
        return `Workspace survey:\n${survey}`;
      }
      throw { tag: 'model', val: e.payload };
    }
    return `${reply.text}\n\nWorkspace survey (${reply.turns} model turns):\n${survey}`;
  },
};
