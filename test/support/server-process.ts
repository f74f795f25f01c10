// How the system tests start the service as operators run it: src/server.ts in a process of its own.
import { nodeArgsOf } from './node-args.js'
import { PRODUCTION_AUDIENCE, PRODUCTION_ISSUER, TEST_SECRET } from './tokens.js'

/**
 * The real server as `node` runs it (its build, or its source under `--import tsx`), never through
 * tsx's CLI, so that a signal reaches the server itself: tsx's CLI relays signals through a parent
 * that SIGKILLs a child which has not acknowledged one within 30 ms, and a loaded machine is slower
 * than that (a SIGTERM test then sees a kill, not a drain).
 */
export const serverProcess = { command: process.execPath, args: nodeArgsOf('src/server.ts') }

/**
 * What the server needs to start under production rules on `databaseUrl`: a free port on loopback,
 * the tests' key, issuer and audience, and event-loop shedding off (other test files share the
 * cores: lag there is theirs; shedding is test/plugins/pressure.test.ts's).
 */
export const productionServerEnv = (databaseUrl: string) => ({
  PATH: process.env.PATH,
  NODE_ENV: 'production',
  HOST: '127.0.0.1',
  PORT: '0',
  DATABASE_URL: databaseUrl,
  JWT_SECRET: TEST_SECRET,
  JWT_ISSUER: PRODUCTION_ISSUER,
  JWT_AUDIENCE: PRODUCTION_AUDIENCE,
  MAX_EVENT_LOOP_DELAY_MS: '0'
})
