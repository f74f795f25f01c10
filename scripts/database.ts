// The database the npm scripts work on: DATABASE_URL, or else the local embedded one (attached to
// when `npm start` is running it, started and stopped around the work otherwise).
import { isProduction, loadConfig } from '../src/config.js'
import { openLocalDatabase } from '../src/local-dev.js'

export async function withDatabase (work: (url: string) => Promise<void>): Promise<void> {
  const config = loadConfig()
  if (config.DATABASE_URL) return work(config.DATABASE_URL)
  if (isProduction(config)) throw new Error('DATABASE_URL is required in production')
  const database = await openLocalDatabase({ port: config.EMBEDDED_POSTGRES_PORT, takeOver: false })
  try {
    await work(database.url)
  } finally {
    await database.stop()
  }
}
