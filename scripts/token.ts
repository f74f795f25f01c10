// npm run -s token [-- --scope SCOPES] [--expires-in SECONDS]: prints only a token signed with
// JWT_SECRET (or the local secret `npm start` uses), so TOKEN=$(npm run -s token) works. Without
// --scope the token carries every scope the API's operations ask for (everyScope, as `npm start`'s
// demo token), so each of them can be tried. Run as a process (tsx, or node dist/scripts/token.js in
// the image) it calls tokenCommand.
import { type Config, isProduction, loadConfig } from '../src/config.js'
import { everyScope, signToken, withLocalDefaults } from '../src/local-dev.js'
import { type Command, type Output, isEntryPoint, processOutput, readCommandLine, usageError } from '../src/command-line.js'

const DEFAULT_LIFETIME_S = 3600
// A century, as db:prune-changes's longest age: past a number's range fast-jwt signs no exp at all,
// a token the service refuses.
const MAX_LIFETIME_S = 36500 * 86400

const command = {
  usage: 'npm run -s token -- [--scope SCOPES] [--expires-in SECONDS]',
  about: 'Prints a token signed with JWT_SECRET, or the local secret `npm start` uses, and nothing else:\n' +
    'TOKEN=$(npm run -s token) works. Without --scope it carries every scope the API\'s operations use.',
  options: {
    scope: { type: 'string', value: 'SCOPES', default: everyScope.join(' '), about: 'the scopes it carries, space-separated' },
    // No default for parseArgs: without the option the lifetime is the shorter of an hour and the
    // service's bound (JWT_MAX_LIFETIME_S), and only one asked for is refused past that bound.
    'expires-in': { type: 'string', value: 'SECONDS', about: 'how long it is valid, at most 100 years (default: 3600, or JWT_MAX_LIFETIME_S if shorter)' }
  }
} satisfies Command

/** Returns the exit code: 0 printed, 1 nothing to sign with, 2 bad arguments. */
export async function tokenCommand (args: string[], env: Record<string, string | undefined> = process.env, io: Output = processOutput): Promise<number> {
  const commandLine = readCommandLine(command, args, io)
  if (typeof commandLine === 'number') return commandLine
  const { values } = commandLine
  const asked = values['expires-in']
  if (asked !== undefined && (!/^\d+$/.test(asked) || Number(asked) <= 0 || Number(asked) > MAX_LIFETIME_S)) {
    return usageError(command, `--expires-in must be a positive whole number of seconds, at most ${MAX_LIFETIME_S} (100 years)`, io)
  }
  if (!values.scope.trim()) return usageError(command, '--scope must name at least one scope', io)

  let config: Config
  try {
    const loaded = loadConfig(env)
    // Under production rules only a configured secret signs: none is generated.
    config = isProduction(loaded) ? loaded : await withLocalDefaults(loaded)
  } catch (error) {
    io.err((error as Error).message)
    return 1
  }
  if (!config.JWT_SECRET) {
    io.err('npm run token signs with JWT_SECRET (HS256); with JWT_PUBLIC_KEY or JWKS_URL, ask the identity provider for a token.')
    return 1
  }
  // The service refuses a token that lives longer than JWT_MAX_LIFETIME_S.
  const maxLifetime = config.JWT_MAX_LIFETIME_S ?? Infinity
  if (asked !== undefined && Number(asked) > maxLifetime) {
    return usageError(command, `--expires-in must be at most ${maxLifetime} seconds (JWT_MAX_LIFETIME_S)`, io)
  }
  io.out(signToken(config, values.scope.trim(), asked === undefined ? Math.min(DEFAULT_LIFETIME_S, maxLifetime) : Number(asked)))
  return 0
}

if (isEntryPoint(import.meta.url)) process.exitCode = await tokenCommand(process.argv.slice(2))
