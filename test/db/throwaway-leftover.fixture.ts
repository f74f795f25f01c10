// Run by test/db/embedded-postgres.test.ts: starts a throwaway cluster as `npm test` does, names its
// data folder on stderr, and waits to be killed with SIGKILL (as a test runner's timeout kills a
// test file), so that neither its stop nor an exit hook runs.
import pg from 'pg'
import { startThrowawayPostgres } from '../../db/embedded-postgres.js'

const server = await startThrowawayPostgres({ inMemory: true })
const client = new pg.Client({ connectionString: server.url })
await client.connect()
const { rows: [{ data_directory: dataDir }] } = await client.query('SHOW data_directory')
await client.end()
process.stderr.write(JSON.stringify({ dataDir }) + '\n')
// A timer keeps the process alive until the SIGKILL: a bare pending promise would not.
setInterval(() => {}, 1 << 30)
