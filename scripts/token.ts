// npm run token -- --scope "read:resource delete:resource" [--expires-in SECONDS]: prints a token
// signed with JWT_SECRET (or the local secret `npm start` uses), to try the API by hand.
import { parseArgs } from 'node:util'
import { isProduction, loadConfig } from '../src/config.js'
import { signToken, withLocalDefaults } from '../src/local-dev.js'

const { values } = parseArgs({
  options: {
    scope: { type: 'string', default: 'read:resource delete:resource' },
    'expires-in': { type: 'string', default: '3600' }
  }
})
const expiresIn = Number(values['expires-in'])
if (!Number.isInteger(expiresIn) || expiresIn <= 0) {
  console.error('--expires-in must be a positive number of seconds')
  process.exit(2)
}
const loaded = loadConfig()
// Under production rules only a configured secret signs: none is generated.
const config = isProduction(loaded) ? loaded : await withLocalDefaults(loaded)
if (!config.JWT_SECRET) {
  console.error('npm run token signs with JWT_SECRET (HS256); with JWT_PUBLIC_KEY, ask the identity provider for a token.')
  process.exit(1)
}
console.log(signToken(config, values.scope, expiresIn))
