// What `npm run -s token` does, as a function: scripts/token.ts runs it as a process, tests run it
// in-process. Prints only a token signed with JWT_SECRET (or the local secret `npm start` uses), so
// TOKEN=$(npm run -s token) works. Bad arguments get one line on stderr and exit 2; --help prints
// the usage.
import { parseArgs } from 'node:util'
import { type Config, isProduction, loadConfig } from '../src/config.js'
import { signToken, withLocalDefaults } from '../src/local-dev.js'
import { type Output, processOutput } from './command.js'

const usage = 'usage: npm run -s token -- [--scope "read:resource delete:resource"] [--expires-in SECONDS]'

/** Returns the exit code: 0 printed, 1 nothing to sign with, 2 bad arguments. */
export async function tokenCommand (args: string[], env: Record<string, string | undefined> = process.env, io: Output = processOutput): Promise<number> {
  let values
  try {
    ({ values } = parseArgs({
      args,
      options: {
        scope: { type: 'string', default: 'read:resource delete:resource' },
        'expires-in': { type: 'string', default: '3600' },
        help: { type: 'boolean', short: 'h', default: false }
      }
    }))
  } catch (error) {
    // parseArgs says which argument it did not expect; the usage says what it does.
    io.err(`${(error as Error).message.split('\n')[0]} (${usage})`)
    return 2
  }
  if (values.help) {
    io.out(usage)
    return 0
  }
  const expiresIn = Number(values['expires-in'])
  if (!/^\d+$/.test(values['expires-in']) || expiresIn <= 0) {
    io.err('--expires-in must be a positive whole number of seconds')
    return 2
  }
  if (!values.scope.trim()) {
    io.err('--scope must name at least one scope')
    return 2
  }

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
  io.out(signToken(config, values.scope.trim(), expiresIn))
  return 0
}
