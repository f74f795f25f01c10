// Runs a command with TEST_DATABASE_URL set: the given one, or a throwaway embedded cluster made for
// this run and removed after it. Used by `npm test` (tap) and `npm run mutation` (Stryker).
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { join } from 'node:path'
import { givenOrThrowawayPostgres } from '../db/embedded-postgres.js'
import { projectRoot } from '../src/project-root.js'

export async function runWithTestDatabase (bin: string, args: string[]): Promise<never> {
  const database = await givenOrThrowawayPostgres(process.env.TEST_DATABASE_URL)
  const child = spawn(join(projectRoot, 'node_modules', '.bin', bin), args, {
    stdio: 'inherit',
    env: { ...process.env, TEST_DATABASE_URL: database.url }
  })
  // Interrupted, the command stops first and the throwaway cluster is still removed after it.
  for (const name of ['SIGINT', 'SIGTERM'] as const) process.on(name, () => child.kill(name))
  const [code, signal] = await once(child, 'exit') as [number | null, string | null]
  await database.stop()
  process.exit(code ?? (signal ? 1 : 0))
}
