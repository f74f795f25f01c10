// Databases on a PostgreSQL server, as the test runs make and drop them: a statement on the server
// itself (CREATE or DROP DATABASE), and the URL of one of its databases.
import pg from 'pg'

/** Runs one statement (CREATE or DROP DATABASE) on its own connection to the server. */
export async function onServer (serverUrl: string, sql: string): Promise<void> {
  const client = new pg.Client({ connectionString: serverUrl })
  await client.connect()
  try {
    await client.query(sql)
  } finally {
    await client.end()
  }
}

/** The URL of database `name` on the server at `serverUrl`. */
export function databaseUrlOf (serverUrl: string, name: string): string {
  const url = new URL(serverUrl)
  url.pathname = `/${name}`
  return url.toString()
}
