// npm run -s db:prune-changes -- --older-than DAYS: deletes the change history recorded more than DAYS
// days ago (retention: README), on DATABASE_URL or the local embedded database. Run it from a
// scheduler (a Kubernetes CronJob, cron); the service never deletes history by itself
// (scripts/prune-changes-command.ts).
import { pruneChangesCommand } from './prune-changes-command.js'

process.exitCode = await pruneChangesCommand(process.argv.slice(2))
