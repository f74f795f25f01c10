// Run by test/system/replication.test.ts: starts a primary and its replica as a test does, names
// their postmasters on stderr, and waits to be killed with SIGKILL (as a test runner's timeout
// kills a test file), so that neither a teardown nor an exit hook runs.
import { startReplicatedPostgres } from '../../db/replicated-postgres.js'

const pair = await startReplicatedPostgres({ onCreated: () => {} })
process.stderr.write(JSON.stringify({ postmasters: pair.postmasterPids() }) + '\n')
// A timer keeps the process alive until the SIGKILL: a bare pending promise would not, node would
// exit on its own (code 13) and run its exit hooks.
setInterval(() => {}, 1 << 30)
