// npm run -s db:prune-changes -- --older-than DAYS: deletes the change history recorded more than DAYS
// days ago (retention: README), on DATABASE_URL or the local embedded database. Run it from a
// scheduler (a Kubernetes CronJob, cron); the service never deletes history by itself. The only way
// history is deleted: the database refuses any other DELETE of it (migration 0006, pruneChanges).
import { parseArgs } from 'node:util'
import pg from 'pg'
import { pruneChanges } from '../db/queries/history.js'
import { withDatabase } from './database.js'

const usage = 'usage: npm run -s db:prune-changes -- --older-than DAYS'
let days: number
try {
  const { values } = parseArgs({ options: { 'older-than': { type: 'string' }, help: { type: 'boolean', short: 'h' } } })
  if (values.help) {
    console.log(usage)
    process.exit(0)
  }
  days = Number(values['older-than'])
  if (!/^\d+$/.test(values['older-than'] ?? '') || days < 1) throw new Error('--older-than must be a whole number of days, at least 1')
} catch (error) {
  console.error(`${(error as Error).message.split('\n')[0]} (${usage})`)
  process.exit(2)
}

await withDatabase(async (url) => {
  const pool = new pg.Pool({ connectionString: url, max: 1 })
  try {
    const pruned = await pruneChanges(pool, days)
    console.log(`Pruned ${pruned} change${pruned === 1 ? '' : 's'} recorded more than ${days} day${days === 1 ? '' : 's'} ago.`)
  } finally {
    await pool.end()
  }
})
