import neostandard from 'neostandard'

export default neostandard({
  ts: true,
  // Generated from openapi/openapi.yaml: checked by `npm run generate:check` and tsc, not by lint.
  ignores: ['src/generated/**', 'dist/**', '.test-build/**', '.stryker-tmp/**', 'reports/**', 'coverage/**', '.tap/**', 'tmp/**', '.data/**']
})
