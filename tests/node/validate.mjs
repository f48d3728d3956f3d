// Validates messages with the MCP project's own zod schemas (tests/schemas.py `validate_official`).
//
//   node validate.mjs <npm prefix holding the official schema packages>
//
// Reads one JSON object a line on stdin: {"schema": "<name>", "message": <any>}, and writes one
// line per request on stdout: {"ok": true} or {"ok": false, "error": "<path>: <issue>; ..."}.
// <name> is an exported zod schema of
//   @modelcontextprotocol/ext-tasks/core/v2   (e.g. GetTaskResultV2Schema, CallToolResultV2Schema)
//   @modelcontextprotocol/ext-tasks/core/v1   (e.g. GetTaskResultV1Schema)
//   @modelcontextprotocol/core                (e.g. DiscoverResultSchema, ListToolsResultSchema)
// either bare, when only one of them exports it, or qualified as "<module>:<name>".
// Each schema's own `.safeParse` decides; nothing here adds or relaxes a rule.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { pathToFileURL } from "node:url";

const MODULES = [
  ["@modelcontextprotocol/ext-tasks/core/v2", "@modelcontextprotocol/ext-tasks", "./core/v2"],
  ["@modelcontextprotocol/ext-tasks/core/v1", "@modelcontextprotocol/ext-tasks", "./core/v1"],
  ["@modelcontextprotocol/core", "@modelcontextprotocol/core", "."],
];

function entryFile(prefix, pkg, subpath) {
  // The ESM entry the package's "exports" map names for `subpath` (import condition).
  const dir = join(prefix, "node_modules", pkg);
  const manifest = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
  let target = manifest.exports[subpath];
  target = typeof target === "string" ? target : target.import;
  target = typeof target === "string" ? target : target.default;
  return join(dir, target);
}

const prefix = process.argv[2];
if (!prefix) {
  process.stderr.write("usage: node validate.mjs <npm prefix>\n");
  process.exit(2);
}

const qualified = new Map();
const bare = new Map();
for (const [name, pkg, subpath] of MODULES) {
  const module = await import(pathToFileURL(entryFile(prefix, pkg, subpath)).href);
  for (const [exported, value] of Object.entries(module)) {
    if (!exported.endsWith("Schema") || typeof value?.safeParse !== "function") continue;
    qualified.set(`${name}:${exported}`, value);
    bare.set(exported, bare.has(exported) ? null : value); // null: ambiguous, qualify it
  }
}

function describe(issues, base = []) {
  // zod reports a failed union as one issue whose `errors` hold each alternative's issues.
  return issues.map((issue) => {
    const path = [...base, ...issue.path];
    const where = path.length ? path.join(".") : "<root>";
    const alternatives = Array.isArray(issue.errors) && issue.errors.length
      ? ` (${issue.errors.map((alternative) => `[${describe(alternative, path)}]`).join(" or ")})`
      : "";
    return `${where}: ${issue.message}${alternatives}`;
  }).join("; ");
}

function answer(line) {
  let request;
  try {
    request = JSON.parse(line);
  } catch (error) {
    return { ok: false, error: `not JSON: ${error.message}` };
  }
  const schema = qualified.get(request.schema) ?? bare.get(request.schema);
  if (schema === undefined) return { ok: false, error: `unknown schema ${JSON.stringify(request.schema)}` };
  if (schema === null) return { ok: false, error: `ambiguous schema ${JSON.stringify(request.schema)}: qualify it as <module>:<name>` };
  const parsed = schema.safeParse(request.message);
  return parsed.success ? { ok: true } : { ok: false, error: describe(parsed.error.issues) };
}

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of lines) {
  if (line.trim() === "") continue;
  process.stdout.write(JSON.stringify(answer(line)) + "\n");
}
