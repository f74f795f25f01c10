// Runs a command with TEST_DATABASE_URL set: the given one, or a throwaway embedded cluster made for
// this run and removed after it. Used by `npm test` (tap) and `npm run mutation` (Stryker).
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { join } from 'node:path'
import { startThrowawayPostgres } from '../db/embedded-postgres.js'
import { projectRoot } from '../src/project-root.js'

export async function runWithTestDatabase (bin: string, args: string[]): Promise<never> {
  let url = process.env.TEST_DATABASE_URL
  let cleanup = async () => {}
  if (!url) {
    const server = await startThrowawayPostgres()
    url = server.url
    cleanup = server.stop
  }
  const child = spawn(join(projectRoot, 'node_modules', '.bin', bin), args, {
    stdio: 'inherit',
    env: { ...process.env, TEST_DATABASE_URL: url }
  })
  const [code, signal] = await once(child, 'exit') as [number | null, string | null]
  await cleanup()
  process.exit(code ?? (signal ? 1 : 0))
}
