// @aleph/mcp: MCP servers as agent tools. Claude Code's `.mcp.json` and `[[mcp_servers]]` entries
// are read into server configs (bad ones become problems naming the file and key); an McpHub starts
// them through the official SDK client and hands out their tools as `mcp__<server>__<tool>`.
export {
  DEFAULT_CALL_TIMEOUT_MS,
  DEFAULT_START_TIMEOUT_MS,
  expandVariables,
  judgeProjectServers,
  loadMcpServers,
  MAX_PROJECT_SERVERS,
  parseMcpJson,
  parseMcpServerEntries,
  stdioCommandLine,
  type McpConfigProblem,
  type McpServerConfig,
  type McpServerList,
} from './config.js';
export {
  McpHub,
  type McpCommandWrapper,
  type McpHubOptions,
  type McpServerStatus,
  type McpTool,
} from './mcp-hub.js';
export {
  MAX_DESCRIPTION_CHARS,
  MAX_SCHEMA_CHARS,
  MAX_SCHEMA_DEPTH,
  MAX_TOOLS,
  MAX_TOOLS_CHARS,
  MAX_TOOLS_PER_SERVER,
} from './hub-types.js';
// From a module with no SDK types: the SDK's declarations need the DOM lib (`HeadersInit`).
export { capText, MAX_MESSAGE_BYTES, RESULT_CAP, toolOutput, type McpToolOutput } from './tool-result.js';
