// npm run db:migrate: applies pending migrations to DATABASE_URL, or to the local embedded database
// (scripts/migrate-command.ts).
import { migrateCommand } from './migrate-command.js'

process.exitCode = await migrateCommand(process.argv.slice(2))
