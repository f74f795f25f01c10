// The leftover-postmaster rule of `npm start`, with real processes: a child of a live node process
// is in use; once that parent is killed with SIGKILL, the child is an orphan.
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import t from 'tap'
import { isOrphaned } from '../../db/embedded-postgres.js'

t.test('a process whose node parent lives is in use; killed with SIGKILL, its child is orphaned', async (t) => {
  // A node process that starts a long sleep and reports its pid.
  const parent = spawn(process.execPath, ['-e', `
    const child = require('node:child_process').spawn('sleep', ['30'], { stdio: 'ignore' })
    console.log(child.pid)
    setInterval(() => {}, 1000)`], { stdio: ['ignore', 'pipe', 'inherit'] })
  const [chunk] = await once(parent.stdout!, 'data') as [Buffer]
  const sleeper = Number(chunk.toString().trim())
  t.teardown(() => { try { process.kill(sleeper, 'SIGKILL') } catch {} })
  t.equal(await isOrphaned(sleeper), false, 'its node parent is alive')
  parent.kill('SIGKILL')
  await once(parent, 'exit')
  t.equal(await isOrphaned(sleeper), true, 'its parent was killed')
  t.equal(await isOrphaned(2 ** 22 + 12345), true, 'a pid that does not exist')
})
