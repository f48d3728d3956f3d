// Drives the official MCP Tasks client (npm @modelcontextprotocol/ext-tasks, `withTasks`) against a
// 2026-07-28 endpoint over plain HTTP, for tests/conformance/test_official_tasks_client.py.
//
//   node tasks_client.mjs <npm prefix> <url> <tool> <arguments as JSON> [<elicitation answer as JSON>]
//
// The session port below is this project's own: it frames each request as a 2026-07-28 client
// does (params._meta protocolVersion, clientInfo, clientCapabilities declaring the tasks
// extension and form elicitation; MCP-Protocol-Version and Mcp-Method headers) and POSTs it.
// Everything else (creating, polling, answering and settling the task, and validating every
// answer with its own schemas) is the official client's. Prints one JSON line:
//   {"ok": true, "outcome": {...}, "result": {...}}  or  {"ok": false, "error": "..."}
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [prefix, url, tool, argsJson, answerJson] = process.argv.slice(2);
const VERSION = "2026-07-28";
const TASKS = "io.modelcontextprotocol/tasks";

const dir = join(prefix, "node_modules", "@modelcontextprotocol", "ext-tasks");
const manifest = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
const client = await import(pathToFileURL(join(dir, manifest.exports["./client"].import)).href);

function frame(request) {
  const params = request.params ?? {};
  return {
    ...request,
    params: {
      ...params,
      _meta: {
        ...(params._meta ?? {}),
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientInfo": { name: "ext-tasks-test", version: "1" },
        "io.modelcontextprotocol/clientCapabilities": { elicitation: { form: {} }, extensions: { [TASKS]: {} } },
      },
    },
  };
}

function fromBody(text) {
  // A JSON body, or the last JSON-RPC response of an event stream.
  if (!text.startsWith("event:") && !text.startsWith("data:") && !text.startsWith(":")) return JSON.parse(text);
  const data = text.split("\n").filter((line) => line.startsWith("data:")).map((line) => JSON.parse(line.slice(5)));
  return data.filter((message) => "result" in message || "error" in message).at(-1);
}

let nextId = 0;
const port = {
  endpointId: url,
  taskCapabilities: { generation: "v2", capabilities: {} },
  invalidated: false,
  async dispatch(request, options = {}) {
    const body = { ...frame(request), jsonrpc: "2.0", id: ++nextId };
    const response = await fetch(url, {
      method: "POST",
      headers: {
        "Content-Type": "application/json",
        Accept: "application/json, text/event-stream",
        "MCP-Protocol-Version": VERSION,
        "Mcp-Method": body.method,
        ...(options.context?.headers ?? {}),
      },
      body: JSON.stringify(body),
      signal: options.signal,
    });
    const message = fromBody(await response.text());
    return "error" in message ? { kind: "error", error: message.error } : { kind: "result", result: message.result };
  },
  onServerRequest: () => () => {},
  onNotification: () => () => {},
  onInvalidated: () => () => {},
};

try {
  const answer = answerJson ? JSON.parse(answerJson) : { action: "decline" };
  const session = client.withTasks(port, { onInputRequest: async () => answer });
  const execution = await session.callTool(tool, JSON.parse(argsJson));
  const { outcome } = await execution.settle();
  const result = client.resultFromTaskOutcome(outcome);
  await session.close();
  process.stdout.write(JSON.stringify({ ok: true, outcome, result }) + "\n");
} catch (error) {
  process.stdout.write(JSON.stringify({ ok: false, error: `${error?.name}: ${error?.message}` }) + "\n");
}
