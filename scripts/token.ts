// npm run -s token [-- --scope SCOPES] [--expires-in SECONDS]: prints only a token
// (scripts/token-command.ts), so TOKEN=$(npm run -s token) works.
import { tokenCommand } from './token-command.js'

process.exitCode = await tokenCommand(process.argv.slice(2))
