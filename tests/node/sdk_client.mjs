// Drives the official MCP TypeScript SDK v2 client (npm @modelcontextprotocol/client, a 2026-07-28
// client) against an endpoint with its own Streamable HTTP transport, for
// tests/conformance/test_official_sdk_client.py.
//
//   node sdk_client.mjs <npm prefix> <url> <mode> <mode argument as JSON>
//
// The client pins protocol revision 2026-07-28 (so it sends server/discover first and the
// per-request _meta envelope after). Modes, each printing one JSON line:
//   progress {tool, arguments}
//       calls the tool with an onprogress callback:
//       {"ok": true, "progress": [{progress, total, message}...], "result": {...}}
//   logs {tool, arguments, level, listen}
//       with `listen` (a filter) first opens listen(listen) and holds it, then calls the tool with
//       _meta io.modelcontextprotocol/logLevel = level, records every notifications/message, waits
//       `settleMs` (default 0), and tries setLoggingLevel(level) afterwards:
//       {"ok": true, "logs": [{level, logger, data}...], "result": {...}, "setLoggingLevel": "<error>"}
//   listen {filter, tool, arguments, wait, listeners}
//       listen(filter) `listeners` times (default 1), then calls the tool, then waits for
//       `listeners` notifications of method `wait` (delivered through the subscriptions to the client's
//       notification handler), lists the tools and closes the subscriptions:
//       {"ok": true, "honored": [{...} per subscription], "delivered": [method...],
//        "tools": [name...], "result": {...}, "closed": ["local"...]}
//       (a resources/updated is listed as "<method> <uri>")
// Every answer also carries "capabilities", the server's as the client sees them after connecting.
// Failures print {"ok": false, "error": "<name>: <message>"}.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [prefix, url, mode, argJson] = process.argv.slice(2);
const arg = JSON.parse(argJson);
const WAIT_MS = 20000;

const dir = join(prefix, "node_modules", "@modelcontextprotocol", "client");
const manifest = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
const sdk = await import(pathToFileURL(join(dir, manifest.exports["."].import.default)).href);

const client = new sdk.Client({ name: "sdk-client-test", version: "1" },
  { versionNegotiation: { mode: { pin: "2026-07-28" } } });

function within(promise, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no ${what} within ${WAIT_MS} ms`)), WAIT_MS);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

async function progress() {
  const seen = [];
  const result = await client.callTool({ name: arg.tool, arguments: arg.arguments }, {
    onprogress: ({ progress, total, message }) => seen.push({ progress, total, message }),
  });
  return { progress: seen, result };
}

async function logs() {
  const seen = [];
  client.setNotificationHandler("notifications/message", (n) => {
    const { level, logger, data } = n.params;
    seen.push({ level, logger, data });
  });
  const subscription = arg.listen === undefined ? null : await client.listen(arg.listen);
  const result = await client.callTool({
    name: arg.tool, arguments: arg.arguments, _meta: { "io.modelcontextprotocol/logLevel": arg.level },
  });
  await new Promise((resolve) => setTimeout(resolve, arg.settleMs ?? 0));
  if (subscription !== null) await subscription.close();
  let setLoggingLevel = null;
  try {
    await client.setLoggingLevel(arg.level);
  } catch (error) {
    setLoggingLevel = error?.name ?? "Error";
  }
  return { logs: seen, result, setLoggingLevel };
}

async function listen() {
  const delivered = [];
  let arrived;
  let waited = 0;
  const wanted = new Promise((resolve) => { arrived = resolve; });
  for (const method of ["notifications/tools/list_changed", "notifications/resources/list_changed",
    "notifications/prompts/list_changed", "notifications/resources/updated"]) {
    client.setNotificationHandler(method, (n) => {
      delivered.push(n.params?.uri === undefined ? method : `${method} ${n.params.uri}`);
      if (method === arg.wait && ++waited === (arg.listeners ?? 1)) arrived();
    });
  }
  const subscriptions = [];
  for (let n = 0; n < (arg.listeners ?? 1); n++) subscriptions.push(await client.listen(arg.filter));
  const result = await client.callTool({ name: arg.tool, arguments: arg.arguments });
  await within(wanted, arg.wait);
  const tools = (await client.listTools()).tools.map((tool) => tool.name);
  const closed = [];
  for (const subscription of subscriptions) {
    await subscription.close();
    closed.push(await subscription.closed);
  }
  return { honored: subscriptions.map((s) => s.honoredFilter), delivered, tools, result, closed };
}

const modes = { progress, logs, listen };
try {
  await client.connect(new sdk.StreamableHTTPClientTransport(new URL(url)));
  const out = { capabilities: client.getServerCapabilities(), ...(await modes[mode]()) };
  await client.close();
  process.stdout.write(JSON.stringify({ ok: true, ...out }) + "\n");
} catch (error) {
  process.stdout.write(JSON.stringify({ ok: false, error: `${error?.name}: ${error?.message}` }) + "\n");
}
process.exit(0);
