// Another revision of this repository, built beside the bench's own build: `git archive` of it (the
// working tree and the index are left alone), this checkout's node_modules, tsc as `npm run build`
// does. For A/B runs in one bench, such as the replica scenario's "before" (BENCH_REPLICA_BASELINE).
import { execFile, spawn } from 'node:child_process'
import { once } from 'node:events'
import { access, mkdir, symlink } from 'node:fs/promises'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { projectRoot } from '../../src/project-root.js'

const git = async (args: string[]) => (await promisify(execFile)('git', args, { cwd: projectRoot })).stdout.trim()

/** Builds `revision` in a folder under `work`: its short hash, its subject and the folder. */
export async function buildRevision (revision: string, work: string): Promise<{ name: string, subject: string, root: string }> {
  const commit = await git(['rev-parse', '--verify', '--short', `${revision}^{commit}`])
  const subject = await git(['log', '-1', '--format=%s', commit])
  const root = join(work, `revision-${commit}`)
  // Built already in this run: several scenarios may be given the same baseline.
  if (await access(join(root, 'dist', 'src', 'server.js')).then(() => true, () => false)) return { name: commit, subject, root }
  await mkdir(root)
  const archive = spawn('git', ['archive', '--format=tar', commit], { cwd: projectRoot, stdio: ['ignore', 'pipe', 'inherit'] })
  const tar = spawn('tar', ['-x', '-C', root], { stdio: ['pipe', 'inherit', 'inherit'] })
  archive.stdout.pipe(tar.stdin)
  const [[archived], [extracted]] = await Promise.all([once(archive, 'exit'), once(tar, 'exit')])
  if (archived !== 0 || extracted !== 0) throw new Error(`git archive ${commit} | tar -x failed (${archived}, ${extracted})`)
  await symlink(join(projectRoot, 'node_modules'), join(root, 'node_modules'))
  const tsc = spawn(process.execPath, [join(projectRoot, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.build.json'], { cwd: root, stdio: 'inherit' })
  const [code] = await once(tsc, 'exit')
  if (code !== 0) throw new Error(`tsc exited with ${code} building ${commit}`)
  return { name: commit, subject, root }
}
