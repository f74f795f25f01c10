// Swagger UI as a newcomer uses it, in a real browser (Debian's chromium, driven by playwright-core):
// every operation of the spec listed, Authorize with a token, Execute the list, the pre-filled
// DELETE and the change feed, and a call without a token.
// Screenshots of each step go to reports/browser/ for people to look at. UPDATE_DOCS_SCREENSHOT=1
// also writes the operations' screenshot to docs/screenshots/swagger-ui.png, which the README shows.
import { once } from 'node:events'
import { existsSync } from 'node:fs'
import { mkdir, readFile } from 'node:fs/promises'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import { chromium, type Locator, type Page } from 'playwright-core'
import t from 'tap'
import { parse } from 'yaml'
import { projectRoot, specPath } from '../../src/project-root.js'
import { build } from '../support/harness.js'
import { token } from '../support/tokens.js'

const executablePath = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium'
if (!existsSync(executablePath)) {
  // CI installs it (.ci/run); elsewhere: apt-get install chromium.
  if (process.env.CI) throw new Error(`${executablePath} is missing, and CI must run the browser test`)
  t.plan(0, `no chromium at ${executablePath} (apt-get install chromium): the Swagger UI test is skipped`)
  process.exit(0)
}

const screenshots = join(projectRoot, 'reports', 'browser')
await mkdir(screenshots, { recursive: true })
const harness = await build(t)
await harness.seed(JSON.parse(await readFile(join(projectRoot, 'db', 'demo-data.json'), 'utf8')))
const browser = await chromium.launch({ executablePath, args: ['--no-sandbox'] })
t.teardown(() => browser.close())
const page = await browser.newPage({ viewport: { width: 1280, height: 900 } })
page.setDefaultTimeout(20_000)
// What the browser refuses under the docs' Content-Security-Policy: nothing, or the UI is broken.
const refused: string[] = []
page.on('console', (message) => { if (/Content Security Policy/i.test(message.text())) refused.push(message.text()) })

// The page's Authorize button (the dialog has one of its own).
const authorizeButton = page.locator('button.authorize:not(.modal-btn)')
const shoot = (name: string, target: Page | Locator = page) =>
  target.screenshot({ path: join(screenshots, `${name}.png`), ...(target === page ? { fullPage: true } : {}) })

/** Expands an operation, presses Try it out, then Execute; the live response, its status and its body. */
async function execute (operationId: string): Promise<{ answer: Locator, status: string, body: string }> {
  const operation = page.locator(`#operations-permissions-${operationId}`)
  if (!await operation.locator('.try-out__btn').isVisible()) await operation.locator('.opblock-summary').click()
  const tryOut = operation.locator('.try-out__btn')
  if ((await tryOut.textContent())?.trim() === 'Try it out') await tryOut.click()
  // A previous answer stays on the page until cleared: wait for this one.
  const clear = operation.locator('.btn-clear')
  if (await clear.isVisible()) await clear.click()
  await operation.locator('.execute').click()
  const answer = operation.locator('.live-responses-table tr.response')
  const status = (await answer.locator('.response-col_status').textContent())?.trim() ?? ''
  const body = (await answer.locator('.response-col_description').textContent()) ?? ''
  // The step's picture is the live response, not the whole operation (5,700 pixels tall once
  // expanded, half a second of chromium's CPU a picture on a machine the tests share).
  return { answer: operation.locator('.live-responses-table'), status, body }
}

async function authorize (value?: string) {
  await authorizeButton.click()
  const dialog = page.locator('.modal-ux')
  if (value === undefined) await dialog.locator('button.modal-btn.auth', { hasText: 'Logout' }).click()
  else {
    await dialog.locator('input').fill(value)
    await dialog.locator('button.modal-btn.auth.authorize').click()
  }
  await shoot(value === undefined ? '4a-logged-out' : '1b-authorized', dialog)
  await dialog.locator('button.btn-done').click()
  await dialog.waitFor({ state: 'detached' })
}

// Every operation of the spec, as Swagger UI labels it: "GET /healthz".
const methods = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace']
const spec = parse(await readFile(specPath, 'utf8')) as { paths: Record<string, Record<string, unknown>> }
const specOperations = Object.entries(spec.paths)
  .flatMap(([path, item]) => methods.filter((method) => method in item).map((method) => `${method.toUpperCase()} ${path}`))

t.test('Swagger UI at /docs shows the operations near the top', async (t) => {
  await page.goto(`${harness.baseUrl}/docs`)
  const list = page.locator('#operations-permissions-listClientPermissions')
  await list.waitFor()
  t.match(await page.locator('.info .title').textContent(), /Client Permissions Service/)
  const box = await authorizeButton.boundingBox()
  t.ok(box && box.y < 900, `Authorize is on the first screen (y=${box?.y})`)
  const feed = page.locator('#operations-permissions-listAllPermissionChanges')
  t.ok(await feed.isVisible(), 'the change feed is listed')
  t.match(await feed.locator('.opblock-summary').textContent(), /GET\s*\/permission_changes/)
  await shoot('1-docs')
})

t.test('Swagger UI lists every operation of openapi/openapi.yaml, each once, and no other', async (t) => {
  t.ok(specOperations.length >= 7, `the spec was read: ${specOperations.join(', ')}`)
  const listed = await page.locator('.opblock').evaluateAll((blocks) => blocks.map((block) =>
    `${block.querySelector('.opblock-summary-method')?.textContent?.trim()} ${block.querySelector('[data-path]')?.getAttribute('data-path')}`))
  t.same([...listed].sort(), [...specOperations].sort(), 'the page lists the spec\'s operations, each once')
  // The operations, from the title to the last of them: the picture the README shows.
  const last = await page.locator('.opblock').last().boundingBox()
  t.ok(last, 'the last operation has a box')
  const operations = { path: join(screenshots, '0-operations.png'), fullPage: true, clip: { x: 0, y: 0, width: 1280, height: Math.ceil((last?.y ?? 0) + (last?.height ?? 0) + 24) } }
  await page.screenshot(operations)
  if (process.env.UPDATE_DOCS_SCREENSHOT === '1') {
    await page.screenshot({ ...operations, path: join(projectRoot, 'docs', 'screenshots', 'swagger-ui.png') })
  }
})

t.test('Authorize with a token, Execute the list with the pre-filled ids → 200 and the demo permissions', async (t) => {
  await authorize(token({ scope: 'read:resource delete:resource' }))
  const { answer, status, body } = await execute('listClientPermissions')
  t.equal(status, '200')
  t.match(body, /perm_create_customers/)
  t.match(body, /read:orders/)
  await shoot('2-list-200', answer)
})

t.test('Execute the DELETE with its pre-filled example body → 204, and the two grants are gone', async (t) => {
  const operation = page.locator('#operations-permissions-unauthorizeClientPermissions')
  await operation.locator('.opblock-summary').click()
  await operation.locator('.try-out__btn').click()
  t.match(await operation.locator('textarea.body-param__text').inputValue(), /perm_read_refunds[\s\S]*perm_create_refunds/, 'the example is pre-filled')
  const { answer, status } = await execute('unauthorizeClientPermissions')
  t.equal(status, '204')
  await shoot('3-delete-204', answer)
  const { rows } = await harness.db.query(
    "SELECT permission_id FROM grants WHERE resource_id = 'orders-api' AND client_id = 'billing-app' AND permission_id LIKE '%refunds'"
  )
  t.same(rows, [], 'perm_read_refunds and perm_create_refunds removed')
})

t.test('Execute the change feed → 200, and the DELETE\'s change is in it', async (t) => {
  // Readable once no older transaction is open anywhere on the shared test cluster: Execute again until then.
  let feed = await execute('listAllPermissionChanges')
  for (const deadline = Date.now() + 20_000; !/perm_read_refunds/.test(feed.body) && Date.now() < deadline;) {
    await page.waitForTimeout(200)
    feed = await execute('listAllPermissionChanges')
  }
  t.equal(feed.status, '200')
  t.match(feed.body, /"action": "unauthorized"[\s\S]*perm_read_refunds[\s\S]*perm_create_refunds/)
  await shoot('3b-feed-200', feed.answer)
})

t.test('without a token → 401 and the problem shown', async (t) => {
  await authorize()
  const { answer, status, body } = await execute('listClientPermissions')
  t.equal(status, '401')
  t.match(body, /\/problems\/missing-credentials/)
  await shoot('4-no-token-401', answer)
})

t.test('the whole tour ran under the docs\' Content-Security-Policy without a refusal; no page may frame the docs', async (t) => {
  t.same(refused, [])
  const response = await page.request.get(`${harness.baseUrl}/docs/`)
  t.match(response.headers()['content-security-policy'], /frame-ancestors 'none'/)
  // A page of another origin (another port) that frames the docs gets an empty frame.
  const framer = createServer((_request, response) => {
    response.setHeader('content-type', 'text/html')
    response.end(`<iframe src="${harness.baseUrl}/docs/static/index.html"></iframe>`)
  })
  framer.listen(0, '127.0.0.1')
  await once(framer, 'listening')
  t.teardown(() => framer.close())
  const framing = await browser.newPage()
  t.teardown(() => framing.close())
  // The page's load event waits for its frame's.
  await framing.goto(`http://127.0.0.1:${(framer.address() as AddressInfo).port}/`, { waitUntil: 'load' })
  const [, frame] = framing.frames()
  t.ok(frame, 'the frame is there')
  t.equal(await frame.locator('#swagger-ui').count(), 0, 'the docs did not load inside it')
})

t.test('a document or configuration named in the page\'s URL (?url=, ?configUrl=) is not loaded: the spec\'s operations are shown', async (t) => {
  // Same-origin JSON that is no OpenAPI document: loaded, the page would list no operation. The
  // service drops the query (plugins/docs.ts), with which the UI would not find its document at all.
  await page.goto(`${harness.baseUrl}/docs/?url=/healthz`)
  await page.locator('#operations-permissions-listClientPermissions').waitFor()
  t.equal(await page.locator('.opblock').count(), specOperations.length, '?url= ignored')
  t.equal(page.url(), `${harness.baseUrl}/docs/`)
  await page.goto(`${harness.baseUrl}/docs/?configUrl=/healthz`)
  await page.locator('#operations-permissions-listClientPermissions').waitFor()
  t.equal(await page.locator('.opblock').count(), specOperations.length, '?configUrl= ignored')
})
