// npm test: runs tap against a real PostgreSQL: TEST_DATABASE_URL when given, else a throwaway
// embedded cluster made for this run. Arguments pass through to tap (npm test -- test/x.test.ts).
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { join } from 'node:path'
import { startThrowawayPostgres } from '../db/embedded-postgres.js'
import { projectRoot } from '../src/project-root.js'

let url = process.env.TEST_DATABASE_URL
let cleanup = async () => {}
if (!url) {
  const server = await startThrowawayPostgres()
  url = server.url
  cleanup = server.stop
}

const tap = spawn(join(projectRoot, 'node_modules', '.bin', 'tap'), process.argv.slice(2), {
  stdio: 'inherit',
  env: { ...process.env, TEST_DATABASE_URL: url }
})
const [code, signal] = await once(tap, 'exit') as [number | null, string | null]
await cleanup()
process.exit(code ?? (signal ? 1 : 0))
