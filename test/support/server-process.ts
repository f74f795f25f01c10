// How the system tests start the service as operators run it: src/server.ts in a process of its own.
import { join } from 'node:path'
import { projectRoot } from '../../src/project-root.js'

/**
 * The real server as `node --import tsx src/server.ts`, so that a signal reaches the server itself:
 * tsx's CLI relays signals through a parent that SIGKILLs a child which has not acknowledged one
 * within 30 ms, and a loaded machine is slower than that (a SIGTERM test then sees a kill, not a
 * drain).
 */
export const serverProcess = { command: process.execPath, args: ['--import', 'tsx', join(projectRoot, 'src', 'server.ts')] }
