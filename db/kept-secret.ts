// A secret made once and kept in a file of its own (the local cluster's password, the local JWT
// secret), by any number of processes at once: each writes a candidate to a file of its own and
// links it into place, so that they all end with the one that got there first, whole.
import { randomBytes } from 'node:crypto'
import { link, mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises'
import { dirname } from 'node:path'

/**
 * The secret in `file` when it holds at least `minLength` characters; else a new one of `bytes`
 * random bytes (base64url), put in place: linked when there is no file (another process's, linked
 * first, is kept), renamed over one too short (cut short by a run killed while writing it, or
 * edited). What is in place afterwards.
 */
export async function keptSecret (file: string, { bytes, minLength = 1 }: { bytes: number, minLength?: number }): Promise<string> {
  const existing = (await readFile(file, 'utf8').catch(() => undefined))?.trim()
  if (existing !== undefined && existing.length >= minLength) return existing
  await mkdir(dirname(file), { recursive: true })
  const made = `${file}.${process.pid}.${randomBytes(4).toString('hex')}`
  await writeFile(made, randomBytes(bytes).toString('base64url') + '\n', { mode: 0o600 })
  try {
    if (existing === undefined) {
      await link(made, file).catch((error: NodeJS.ErrnoException) => { if (error.code !== 'EEXIST') throw error })
    } else {
      await rename(made, file)
    }
  } finally {
    await rm(made, { force: true })
  }
  return (await readFile(file, 'utf8')).trim()
}
