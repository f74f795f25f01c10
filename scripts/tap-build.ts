// tap runs test files with a Test class it builds for the plugins package.json names ("tap"."plugin");
// after `npm ci` it is built with tap's default set. The tap command rebuilds it when the two differ,
// but only for the files: the runner keeps the set it loaded, and starts every file with that set's
// loaders (TypeScript, mocks) in its node arguments. On a fresh clone's first `npm test` that cost
// about 40 s of CPU (144 s against 117 s the run after). Built before tap starts, the first run is as
// the others.
import { signature } from '@tapjs/test'
import type { TapConfig } from '@tapjs/config'
import { runBin } from './test-database.js'

/** Builds tap for the configured plugins when it was built for others; false when the build failed. */
export async function tapBuiltFor (config: TapConfig): Promise<boolean> {
  if (signature === config.pluginSignature) return true
  return await runBin('tap', ['build'], {}) === 0
}
