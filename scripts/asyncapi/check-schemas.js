// Compiles docs/schemas with a second JSON Schema implementation (ajv,
// draft 2020-12, strict mode, ECMA-262 regular expressions as JavaScript and
// most Java validators use them), and checks the contract examples that must
// pass: the valid inputs and the expected outputs. pkg/contractschema's Go
// tests are the full suite (Go's RE2 engine); this catches a pattern or
// keyword that only one engine accepts. Run by validate.sh (make lint).
'use strict';
const fs = require('fs');
const path = require('path');
const Ajv2020 = require('ajv/dist/2020').default;
const addFormats = require('ajv-formats');

const root = path.resolve(__dirname, '../..');
const dir = path.join(root, 'docs/schemas');
const examples = path.join(root, 'testdata/contract');
const readJSON = (p) => JSON.parse(fs.readFileSync(p, 'utf8'));

// strictTuples is off: a position's prefixItems names longitude and latitude
// only, the optional altitude is left to items.
const ajv = new Ajv2020({ strict: true, strictTuples: false, allowUnionTypes: true, allErrors: true });
addFormats(ajv);
ajv.addKeyword('x-kafka-header-encoding');

const ids = {};
for (const f of fs.readdirSync(dir).filter((f) => f.endsWith('.schema.json')).sort()) {
  const s = readJSON(path.join(dir, f));
  ajv.addSchema(s);
  ids[f] = s.$id;
}
let failed = 0;
const check = (schema, doc, what) => {
  const validate = ajv.getSchema(ids[schema]);
  if (!validate(doc)) {
    failed++;
    console.error(`check-schemas: ${what} fails ${schema}: ${ajv.errorsText(validate.errors)}`);
  }
};
for (const f of Object.keys(ids)) ajv.getSchema(ids[f]); // compile every schema

for (const f of fs.readdirSync(examples).filter((f) => f.startsWith('valid-')).sort()) {
  check('passport-envelope.schema.json', readJSON(path.join(examples, f)), f);
}
const outputs = readJSON(path.join(examples, 'expected-outputs.json'));
for (const [f, o] of Object.entries(outputs)) {
  for (const [type, schema] of [['ModeStatusChangedEvent', 'mode-status-changed-event.schema.json'], ['RouteGeoRefEvent', 'route-georef-event.schema.json']]) {
    const doc = { type, data: o.data, traceId: o.traceId, correlationId: o.correlationId, group: 'pcp', source: 'route-processing' };
    check(schema, doc, `expected output of ${f} as ${type}`);
  }
}
if (failed > 0) process.exit(1);
console.log(`check-schemas: ${Object.keys(ids).length} schemas compile (ajv ${require('ajv/package.json').version}, draft 2020-12, strict); contract examples pass`);
