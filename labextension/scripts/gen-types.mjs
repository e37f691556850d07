// Generate src/generated/api.ts from docs/openapi.yaml with openapi-typescript's Node API;
// `--check` fails when the file is stale instead of writing it.
//
// The Node API rather than the CLI for one option the CLI lacks: a file's bytes
// (`format: binary`, the raw bodies of uploads and predictions) are typed as a Blob, which
// is what the browser sends, instead of a string (https://openapi-ts.dev/node).
import fs from 'node:fs';
import openapiTS, { astToString, COMMENT_HEADER } from 'openapi-typescript';
import ts from 'typescript';

const source = new URL('../../docs/openapi.yaml', import.meta.url);
const output = new URL('../src/generated/api.ts', import.meta.url);
const BLOB = ts.factory.createTypeReferenceNode('Blob');

const ast = await openapiTS(source, {
  enumValues: true,
  emptyObjectsUnknown: true,
  defaultNonNullable: false,
  transform: schema => (schema.format === 'binary' ? BLOB : undefined)
});
const text = COMMENT_HEADER + astToString(ast);

if (process.argv.includes('--check')) {
  if (fs.readFileSync(output, 'utf8') !== text) {
    console.error(
      'src/generated/api.ts is not up to date with docs/openapi.yaml: run `jlpm gen:types`'
    );
    process.exit(1);
  }
} else {
  fs.writeFileSync(output, text, 'utf8');
}
