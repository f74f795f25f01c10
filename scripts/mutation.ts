// npm run mutation: Stryker over the route, auth, error-handling and query code (stryker.config.json),
// against a real PostgreSQL like the tests. Reports: reports/mutation/mutation.{json,html}.
import { runWithTestDatabase } from './test-database.js'

await runWithTestDatabase('stryker', ['run', ...process.argv.slice(2)])
