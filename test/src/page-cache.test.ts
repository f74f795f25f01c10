// The list's page cache on its own: what it keeps, what it lets go first, and what it counts.
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import t from 'tap'
import { type KeptPage, PageCache } from '../../src/page-cache.js'

const ENTRY = 512 // src/page-cache.ts's estimate of an entry's own cost
const pageOf = (version: string, bytes: number): KeptPage => ({ version, body: Buffer.alloc(bytes, 'x') })
const sizeOf = (key: string, page: KeptPage) => page.body.length + 2 * (key.length + page.version.length) + ENTRY

t.test('a page built is kept under its key, and served as kept', async (t) => {
  const cache = new PageCache(10_000)
  t.equal(cache.candidate('a'), undefined)
  const page = pageOf('7', 100)
  cache.built('a', page)
  t.equal(cache.candidate('a'), page)
  t.equal(cache.bytes, sizeOf('a', page))
  cache.served('a', page)
  t.same({ hits: cache.hits, misses: cache.misses }, { hits: 1, misses: 1 })
})

t.test('a small page cut out of a block Node shares between buffers is kept in memory of its own; a page in its own is kept as it is', async (t) => {
  const cache = new PageCache(100_000)
  const small = { version: '7', body: Buffer.from('[{"permission_id":"p_read_orders"}]') }
  t.ok(small.body.buffer.byteLength > small.body.byteLength, 'Buffer.from() of a short text: a slice of a shared block')
  cache.built('a', small)
  const kept = cache.candidate('a')!
  t.equal(kept.body.buffer.byteLength, small.body.byteLength, 'kept: no more memory than its bytes')
  t.equal(kept.body.toString(), small.body.toString())
  t.equal(kept.version, '7')
  t.equal(cache.bytes, sizeOf('a', small))
  const own = pageOf('8', 5_000)
  cache.built('b', own)
  t.equal(cache.candidate('b'), own, 'already its own: not copied')
  // The first slice of a block starts where the block does, and still shares it.
  const first = { version: '9', body: Buffer.from(new ArrayBuffer(8192), 0, 100).fill('x') }
  cache.built('c', first)
  t.equal(cache.candidate('c')!.body.buffer.byteLength, 100, 'a slice at the start of a block: copied too')
})

t.test('a page built again replaces the one kept, and its bytes', async (t) => {
  const cache = new PageCache(10_000)
  cache.built('a', pageOf('7', 100))
  const newer = pageOf('8', 300)
  cache.built('a', newer)
  t.equal(cache.candidate('a'), newer)
  t.equal(cache.bytes, sizeOf('a', newer))
  t.equal(cache.misses, 2)
})

t.test('a page built from an older version than the one kept leaves the newer in place: the cache never moves back', async (t) => {
  // Two reads racing: the one that read the older version finishes last.
  const cache = new PageCache(10_000)
  const newer = pageOf('10', 100)
  cache.built('a', newer)
  cache.built('a', pageOf('9', 300)) // compared as numbers: "9" < "10"
  t.equal(cache.candidate('a'), newer)
  t.equal(cache.bytes, sizeOf('a', newer))
  t.equal(cache.misses, 2, 'built by the database all the same')
  const same = pageOf('10', 100)
  cache.built('a', same)
  t.equal(cache.candidate('a'), same, 'the same version: either will do, the last one is kept')
  t.equal(cache.bytes, sizeOf('a', same))
})

t.test('over its bytes, the page served least recently goes first', async (t) => {
  const page = () => pageOf('1', 800)
  const size = sizeOf('a', page())
  const cache = new PageCache(8 * size)
  const pages = Object.fromEntries([...'abcdefgh'].map((key) => [key, page()]))
  for (const [key, kept] of Object.entries(pages)) cache.built(key, kept)
  t.equal(cache.bytes, 8 * size, 'eight fit exactly')
  cache.served('a', pages.a) // a is now the most recently served: b is the oldest
  cache.built('i', page())
  t.equal(cache.candidate('b'), undefined, 'the least recently served went')
  t.ok([...'acdefghi'].every((key) => cache.candidate(key)), 'the others stay')
  // A quarter of the budget, the most a page may take: two must go.
  cache.built('big', pageOf('1', 2 * size - 2 * ('big'.length + 1) - ENTRY))
  t.ok(cache.candidate('big'))
  t.equal(cache.candidate('c'), undefined)
  t.equal(cache.candidate('d'), undefined, 'as many go as it takes')
  t.ok([...'aefghi'].every((key) => cache.candidate(key)))
  t.equal(cache.bytes, 8 * size)
})

t.test('a page larger than a quarter of the budget is not kept, and does not push the others out', async (t) => {
  const cache = new PageCache(4_000)
  const small = pageOf('1', 100)
  cache.built('small', small)
  cache.built('large', pageOf('1', 4_000 / 4))
  t.equal(cache.candidate('large'), undefined)
  t.equal(cache.candidate('small'), small)
  t.equal(cache.bytes, sizeOf('small', small))
  cache.built('small', pageOf('2', 4_000))
  t.equal(cache.candidate('small'), undefined, 'and the page it replaces is gone: it was of an older version')
  t.equal(cache.bytes, 0)
})

t.test('a page served after it was replaced counts, and leaves the newer one in place', async (t) => {
  const cache = new PageCache(10_000)
  const older = pageOf('1', 10)
  cache.built('a', older)
  const newer = pageOf('2', 10)
  cache.built('a', newer)
  cache.served('a', older)
  t.equal(cache.candidate('a'), newer)
  t.equal(cache.hits, 1)
})

t.test('many small pages (a client with a few grants, pages past the end) stay within the budget: an entry costs what is counted', async (t) => {
  // A full collection before each reading, so that the heap holds what is alive and nothing else.
  setFlagsFromString('--expose-gc')
  const gc = runInNewContext('gc') as () => void
  const budget = 16 * 1024 * 1024
  const alive = () => { gc(); gc(); const { heapUsed, arrayBuffers } = process.memoryUsage(); return heapUsed + arrayBuffers }
  for (const text of ['[]', `[${'{"id":"p_read_orders","name":"read:orders"},'.repeat(4)}{"id":"p"}]`]) {
    const cache = new PageCache(budget)
    const before = alive()
    // Keys as the route makes them: the same client, one page after another past the end.
    for (let page = 0; cache.bytes < budget - 4096; page++) {
      cache.built(JSON.stringify(['orders-api', 'app-a', 'name.asc', 50, page]), { version: '1042', body: Buffer.from(text) })
    }
    const held = alive() - before
    t.ok(held <= budget, `pages of ${text.length} bytes: ${(held / 1048576).toFixed(1)} MiB on the heap and in buffers for a budget of 16 MiB`)
    t.ok(cache.candidate(JSON.stringify(['orders-api', 'app-a', 'name.asc', 50, 0])), 'and all kept (none went, the budget not yet reached)')
  }
})
