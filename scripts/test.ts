// npm test: runs tap against a real PostgreSQL: TEST_DATABASE_URL when given, else a throwaway
// embedded cluster made for this run. Arguments pass through to tap (npm test -- test/x.test.ts).
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { chmod, mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { freePort, startEmbeddedPostgres } from '../db/embedded-postgres.js'
import { projectRoot } from '../src/project-root.js'

let url = process.env.TEST_DATABASE_URL
let cleanup = async () => {}
if (!url) {
  const dir = await mkdtemp(join(tmpdir(), 'client-permissions-test-'))
  // Run as root, PostgreSQL runs as "postgres", which must be able to enter this folder.
  await chmod(dir, 0o755)
  const server = await startEmbeddedPostgres({ dataDir: join(dir, 'pg'), port: await freePort(), ephemeral: true })
  url = server.url
  cleanup = async () => {
    await server.stop()
    await rm(dir, { recursive: true, force: true })
  }
}

const tap = spawn(join(projectRoot, 'node_modules', '.bin', 'tap'), process.argv.slice(2), {
  stdio: 'inherit',
  env: { ...process.env, TEST_DATABASE_URL: url }
})
const [code, signal] = await once(tap, 'exit') as [number | null, string | null]
await cleanup()
process.exit(code ?? (signal ? 1 : 0))
