// A small upstream MCP server (stdio) for the crash test: `append_line`
// appends one line to a file after an optional delay, a write that is not
// idempotent (running it twice leaves two lines).
import { appendFileSync } from "node:fs";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const server = new McpServer({ name: "ledger", version: "1.0.0" });
server.registerTool(
  "append_line",
  {
    description: "Append one line to a file",
    inputSchema: { path: z.string(), line: z.string(), delay_ms: z.number().optional() },
    annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: false },
  },
  async ({ path, line, delay_ms: delayMs }) => {
    await new Promise((resolveWait) => setTimeout(resolveWait, delayMs ?? 0));
    appendFileSync(path, `${line}\n`);
    return { content: [{ type: "text", text: `appended ${line}` }] };
  },
);
await server.connect(new StdioServerTransport());
