// Preloaded into every test process `npm test` starts (NODE_OPTIONS): leaves out tap's process
// recording, which the suite does not use (no coverage, no `--changed`) and which cost each test
// file about 1 s of CPU on Node 20 (docs/testing.md, "How long a run takes").
//
// tap's runner starts every test file with `--import=@tapjs/processinfo/import`, and no setting of
// tap 21 leaves it out. Below Node 24.13 that module registers loader hooks on a thread of their
// own (every module the file loads then makes a round trip there, and its source is measured), and
// it hooks require() and the process's end to record the same. A NODE_OPTIONS import runs before
// the command line's, so this module is first: it declines that one registration and sets the
// switch processinfo reads to skip the rest. Every other module.register (import-in-the-middle for
// the tracing tests) goes through. Should a later tap name these differently, nothing breaks: the
// files run as before, only slower.
import module from 'node:module'

const register = module.register
module.register = function registerUnlessProcessInfo (this: unknown, ...args: Parameters<typeof register>) {
  if (String(args[0]).includes('/@tapjs/processinfo/')) return
  return register.apply(this, args)
} as typeof register

// processinfo skips its require hook, environment and exit recording for the process whose pid this is.
process.env.__TAPJS_PROCESSINFO_TESTING_NO_REGISTER__ = String(process.pid)
