// npm run -s token [-- --scope "read:resource delete:resource"] [--expires-in SECONDS]: prints only a
// token signed with JWT_SECRET (or the local secret `npm start` uses), so TOKEN=$(npm run -s token)
// works. Bad arguments get one line on stderr and exit 2; --help prints the usage.
import { parseArgs } from 'node:util'
import { isProduction, loadConfig } from '../src/config.js'
import { signToken, withLocalDefaults } from '../src/local-dev.js'

const usage = 'usage: npm run -s token -- [--scope "read:resource delete:resource"] [--expires-in SECONDS]'

function refuse (message: string, code = 2): never {
  console.error(message)
  process.exit(code)
}

let values
try {
  ({ values } = parseArgs({
    options: {
      scope: { type: 'string', default: 'read:resource delete:resource' },
      'expires-in': { type: 'string', default: '3600' },
      help: { type: 'boolean', short: 'h', default: false }
    }
  }))
} catch (error) {
  // parseArgs says which argument it did not expect; the usage says what it does.
  refuse(`${(error as Error).message.split('\n')[0]} (${usage})`)
}
if (values.help) {
  console.log(usage)
  process.exit(0)
}
const expiresIn = Number(values['expires-in'])
if (!/^\d+$/.test(values['expires-in']) || expiresIn <= 0) refuse('--expires-in must be a positive whole number of seconds')
if (!values.scope.trim()) refuse('--scope must name at least one scope')

let config
try {
  const loaded = loadConfig()
  // Under production rules only a configured secret signs: none is generated.
  config = isProduction(loaded) ? loaded : await withLocalDefaults(loaded)
} catch (error) {
  refuse((error as Error).message, 1)
}
if (!config.JWT_SECRET) {
  refuse('npm run token signs with JWT_SECRET (HS256); with JWT_PUBLIC_KEY or JWKS_URL, ask the identity provider for a token.', 1)
}
console.log(signToken(config, values.scope.trim(), expiresIn))
