// Builds the UI into dist/: index.html, assets/app.js and assets/app.css (minified, with source
// maps). `node build.mjs --watch` rebuilds on change.
import { cp, mkdir, rm } from "node:fs/promises";
import * as esbuild from "esbuild";

const watch = process.argv.includes("--watch");
await rm("dist", { recursive: true, force: true });
await mkdir("dist/assets", { recursive: true });
await cp("index.html", "dist/index.html");

const options = {
  // app.tsx imports styles.css, which esbuild writes beside it as app.css.
  entryPoints: { app: "src/app.tsx" },
  outdir: "dist/assets",
  bundle: true,
  minify: !watch,
  sourcemap: true,
  target: ["es2022", "chrome110", "firefox115", "safari16"],
  jsx: "automatic",
  jsxImportSource: "preact",
  legalComments: "linked",
  logLevel: "info",
};
if (watch) {
  await (await esbuild.context(options)).watch();
} else {
  await esbuild.build(options);
}
