// Builds the CommonJS half of a package, after `tsc -b` built its ES module
// half (and type-checked it) into dist/esm:
//
//   node scripts/build-cjs.mjs packages/client packages/orpc-agent
//
// Every src/**/*.ts is transpiled on its own (the sources compile with
// isolatedModules, so one file at a time is exact) into dist/cjs/**/*.js.
// Each is transpiled as a `.cts` file under NodeNext, so static imports
// become require() calls while `import()` stays a real dynamic import: that
// is how the CommonJS build of @gavel/orpc-agent loads the ESM-only
// @orpc/server on Node 20, which cannot require() an ES module. The
// declarations of the ESM half are copied beside the JavaScript (a .d.ts in
// dist/cjs is read as CommonJS, as it must be for `require` consumers), and
// dist/cjs/package.json marks the directory CommonJS.
import { copyFileSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");

/** Every file under `dir` whose name ends with `suffix`, recursively. */
function filesUnder(dir, suffix) {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((entry) => entry.isFile() && entry.name.endsWith(suffix))
    .map((entry) => join(entry.parentPath, entry.name));
}

function buildCommonJs(packageDir) {
  const src = join(packageDir, "src");
  const esm = join(packageDir, "dist", "esm");
  const cjs = join(packageDir, "dist", "cjs");
  rmSync(cjs, { recursive: true, force: true });
  let failed = false;
  for (const file of filesUnder(src, ".ts")) {
    const relativePath = relative(src, file);
    const output = ts.transpileModule(readFileSync(file, "utf8"), {
      fileName: file.replace(/\.ts$/, ".cts"),
      reportDiagnostics: true,
      compilerOptions: {
        module: ts.ModuleKind.NodeNext,
        moduleResolution: ts.ModuleResolutionKind.NodeNext,
        target: ts.ScriptTarget.ES2022,
        isolatedModules: true,
        esModuleInterop: false,
      },
    });
    for (const diagnostic of output.diagnostics ?? []) {
      failed = true;
      console.error(`${file}: ${ts.flattenDiagnosticMessageText(diagnostic.messageText, "\n")}`);
    }
    const target = join(cjs, relativePath.replace(/\.ts$/, ".js"));
    mkdirSync(dirname(target), { recursive: true });
    writeFileSync(target, output.outputText);
  }
  for (const declaration of filesUnder(esm, ".d.ts")) {
    const target = join(cjs, relative(esm, declaration));
    mkdirSync(dirname(target), { recursive: true });
    copyFileSync(declaration, target);
  }
  writeFileSync(join(cjs, "package.json"), `${JSON.stringify({ type: "commonjs" }, null, 2)}\n`);
  if (failed) {
    throw new Error(`the CommonJS build of ${packageDir} failed`);
  }
}

const packages = process.argv.slice(2);
if (packages.length === 0) {
  console.error("usage: node scripts/build-cjs.mjs <package dir>...");
  process.exit(2);
}
for (const packageDir of packages) {
  buildCommonJs(resolve(root, packageDir));
}
