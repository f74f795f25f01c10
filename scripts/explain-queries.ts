// npm run db:explain [-- GRANTS]: the plans of the service's statements on a large data set.
// Builds a throwaway embedded cluster (or uses DATABASE_URL, which it fills: use an empty database),
// generates GRANTS grants (default 1,000,000) inside PostgreSQL with generate_series, and prints
// EXPLAIN (ANALYZE, BUFFERS) of each statement as the service runs it.
import pg from 'pg'
import { givenOrThrowawayPostgres } from '../db/embedded-postgres.js'
import { migrateDatabase } from '../db/migrate.js'
import { listGrantedPermissionsSql, unauthorizeSql } from '../db/queries.js'

const total = Number(process.argv[2] ?? 1_000_000)
const heavyGrants = 100_000
const typicalGrants = 1_000
if (!Number.isInteger(total) || total < heavyGrants * 2) {
  console.error(`GRANTS must be an integer of at least ${heavyGrants * 2}`)
  process.exit(2)
}

const database = await givenOrThrowawayPostgres(process.env.DATABASE_URL)

const pool = new pg.Pool({ connectionString: database.url, max: 1 })
// The throwaway server stops right after; its goodbye to an idle connection is expected.
pool.on('error', () => {})
try {
  await migrateDatabase(pool)
  // One resource with 100,000 permissions; client "heavy" holds all of them, client "typical"
  // holds 1,000, and enough other clients hold 1,000 each to reach the total.
  const others = Math.ceil((total - heavyGrants - typicalGrants) / typicalGrants)
  const started = Date.now()
  await pool.query(`
    INSERT INTO resources (id) VALUES ('big-api');
    INSERT INTO permissions (id, resource_id, name, description)
      SELECT 'perm-' || lpad(i::text, 6, '0'), 'big-api', 'verb' || (i % 97) || ':noun' || i, 'permission ' || (i * 7919 % 100000)
      FROM generate_series(1, ${heavyGrants}) AS i;
    INSERT INTO clients (id) SELECT 'client-' || i FROM generate_series(1, ${others}) AS i;
    INSERT INTO clients (id) VALUES ('heavy'), ('typical');
    INSERT INTO authorizations (resource_id, client_id) SELECT 'big-api', id FROM clients;
    INSERT INTO grants (resource_id, client_id, permission_id)
      SELECT 'big-api', 'heavy', id FROM permissions;
    INSERT INTO grants (resource_id, client_id, permission_id)
      SELECT 'big-api', c.id, 'perm-' || lpad(((i * 37 + n) % ${heavyGrants} + 1)::text, 6, '0')
      FROM (SELECT id, row_number() OVER (ORDER BY id) AS n FROM clients WHERE id NOT IN ('heavy')) AS c,
        generate_series(1, ${typicalGrants}) AS i;
    ANALYZE;`)
  const { rows: [{ count }] } = await pool.query('SELECT count(*) FROM grants')
  console.log(`-- ${count} grants generated in ${((Date.now() - started) / 1000).toFixed(1)} s\n`)

  const explain = async (title: string, sql: string, values: unknown[]) => {
    const { rows } = await pool.query(`EXPLAIN (ANALYZE, BUFFERS) ${sql}`, values)
    console.log(`-- ${title}\n${rows.map((row) => row['QUERY PLAN']).join('\n')}\n`)
  }
  const byName = listGrantedPermissionsSql([{ property: 'name', direction: 'asc' }])
  await explain('GET page 0, limit 50, sort_by=name.asc; client with 1,000 grants', byName, ['big-api', 'typical', 50, 0])
  await explain('GET deepest page, limit 500; client with 100,000 grants', byName, ['big-api', 'heavy', 500, heavyGrants / 500 - 1])
  await explain('GET page 0, limit 50, sort_by=id.desc; client with 1,000 grants',
    listGrantedPermissionsSql([{ property: 'id', direction: 'desc' }]), ['big-api', 'typical', 50, 0])
  const { rows } = await pool.query("SELECT permission_id FROM grants WHERE client_id = 'heavy' LIMIT 500")
  await pool.query('BEGIN')
  await explain('DELETE 500 ids (rolled back)', unauthorizeSql, ['big-api', 'heavy', rows.map((row) => row.permission_id)])
  await pool.query('ROLLBACK')
} finally {
  await pool.end()
  await database.stop()
}
