// The Node versions the project supports are said once, in package.json's engines, and hold
// everywhere: every installed package accepts each of them (npm ci warns EBADENGINE otherwise), the
// tests run on one of them, and the container image is one of them.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import semver from 'semver'
import t from 'tap'
import { projectRoot } from '../src/project-root.js'

const read = (file: string) => readFileSync(join(projectRoot, file), 'utf8')
const engines: string = JSON.parse(read('package.json')).engines.node
const lock = JSON.parse(read('package-lock.json')) as { packages: Record<string, { version?: string, engines?: { node?: string } | string[] }> }

t.test('engines is a valid range, and the lockfile was made from it', async (t) => {
  t.ok(semver.validRange(engines), engines)
  t.same(lock.packages[''].engines, { node: engines })
})

t.test('every package of the lockfile, dev tools included, accepts every Node version engines names: no EBADENGINE on a supported version', async (t) => {
  const refusing: string[] = []
  let checked = 0
  for (const [path, { version, engines: wanted }] of Object.entries(lock.packages)) {
    if (path === '' || !wanted || Array.isArray(wanted) || !wanted.node) continue
    checked++
    if (!semver.subset(engines, wanted.node)) refusing.push(`${path.replace(/^.*node_modules\//, '')}@${version} wants Node ${wanted.node}`)
  }
  t.ok(checked > 100, `${checked} packages state the Node versions they accept`)
  t.same(refusing, [], `each accepts every version of ${engines}`)
})

t.test('the tests run on a supported version', async (t) => {
  t.ok(semver.satisfies(process.versions.node, engines), `Node ${process.versions.node} is within ${engines}`)
})

t.test('the container image runs a supported version: each stage the same Node line, the newest release of which engines names', async (t) => {
  const tags = [...read('Dockerfile').matchAll(/^FROM node:(\d+)(?:\.(\d+))?(?:\.(\d+))?-\S+/gm)]
  t.ok(tags.length >= 2, 'the build and runtime stages')
  t.equal(new Set(tags.map(([tag]) => tag)).size, 1, 'one image for both')
  for (const [tag, major, minor, patch] of tags) {
    // A floating tag (node:22) is the newest release of its line; a pinned one, that release.
    const newest = `${major}.${minor ?? 999}.${patch ?? 999}`
    t.ok(semver.satisfies(newest, engines), `${tag}: ${newest} is within ${engines}`)
  }
})
