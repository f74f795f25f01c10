// npm run db:seed -- FILE.json: applies pending migrations, then loads FILE.json in one transaction
// into DATABASE_URL, or into the local embedded database (scripts/seed-command.ts).
import { seedCommand } from './seed-command.js'

process.exitCode = await seedCommand(process.argv.slice(2))
