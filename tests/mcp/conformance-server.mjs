// The upstream (stdio) behind the gateway in the MCP conformance run: the
// tools the conformance suite's server scenarios call by name
// (`tools-call-*`, `json-schema-2020-12`), answering as its reference
// fixture does, so those scenarios measure what the gateway passes through.
// Resources, prompts, logging, sampling and elicitation are left out: the
// gateway serves tools and tasks only (docs/mcp.md, "Conformance").
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { CallToolRequestSchema, ListToolsRequestSchema } from "@modelcontextprotocol/sdk/types.js";

// A 1x1 red PNG and a tiny WAV header, as the fixture's notes ask.
const PNG =
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
const WAV = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQAAAAA=";
const RESOURCE = { uri: "test://embedded-resource", mimeType: "text/plain", text: "This is an embedded resource content." };
const EMPTY = { type: "object", properties: {} };

const tools = [
  { name: "test_simple_text", description: "Returns simple text", inputSchema: EMPTY },
  { name: "test_image_content", description: "Returns an image", inputSchema: EMPTY },
  { name: "test_audio_content", description: "Returns audio", inputSchema: EMPTY },
  { name: "test_embedded_resource", description: "Returns an embedded resource", inputSchema: EMPTY },
  { name: "test_multiple_content_types", description: "Returns text, an image and a resource", inputSchema: EMPTY },
  { name: "test_error_handling", description: "Always fails", inputSchema: EMPTY },
  { name: "test_tool_with_progress", description: "Reports progress three times", inputSchema: EMPTY },
  {
    name: "json_schema_2020_12_tool",
    description: "Takes a JSON Schema 2020-12 input",
    inputSchema: {
      $schema: "https://json-schema.org/draft/2020-12/schema",
      type: "object",
      $defs: {
        address: {
          $anchor: "addressDef",
          type: "object",
          properties: { street: { type: "string" }, city: { type: "string" } },
        },
      },
      properties: {
        name: { type: "string" },
        address: { $ref: "#/$defs/address" },
        contactMethod: { type: "string", enum: ["phone", "email"] },
        phone: { type: "string" },
        email: { type: "string" },
      },
      allOf: [{ anyOf: [{ required: ["phone"] }, { required: ["email"] }] }],
      if: { properties: { contactMethod: { const: "phone" } }, required: ["contactMethod"] },
      then: { required: ["phone"] },
      else: { required: ["email"] },
      additionalProperties: false,
    },
  },
];

const results = {
  test_simple_text: () => ({ content: [{ type: "text", text: "This is a simple text response for testing." }] }),
  test_image_content: () => ({ content: [{ type: "image", data: PNG, mimeType: "image/png" }] }),
  test_audio_content: () => ({ content: [{ type: "audio", data: WAV, mimeType: "audio/wav" }] }),
  test_embedded_resource: () => ({ content: [{ type: "resource", resource: RESOURCE }] }),
  test_multiple_content_types: () => ({
    content: [
      { type: "text", text: "Multiple content types test:" },
      { type: "image", data: PNG, mimeType: "image/png" },
      { type: "resource", resource: { ...RESOURCE, uri: "test://mixed-content-resource", mimeType: "application/json", text: "{}" } },
    ],
  }),
  test_error_handling: () => ({
    isError: true,
    content: [{ type: "text", text: "This tool intentionally returns an error for testing" }],
  }),
  json_schema_2020_12_tool: () => ({ content: [{ type: "text", text: "ok" }] }),
};

const server = new Server({ name: "gavel-conformance-upstream", version: "1.0.0" }, { capabilities: { tools: {} } });
server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools }));
server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
  const { name } = request.params;
  if (name === "test_tool_with_progress") {
    const progressToken = request.params._meta?.progressToken;
    for (const progress of [0, 50, 100]) {
      if (progressToken !== undefined) {
        await extra.sendNotification({
          method: "notifications/progress",
          params: { progressToken, progress, total: 100 },
        });
      }
    }
    return { content: [{ type: "text", text: "progress reported" }] };
  }
  const result = results[name];
  if (!result) throw new Error(`unknown tool ${name}`);
  return result();
});
await server.connect(new StdioServerTransport());
