// Copies the chart library from node_modules into the dashboard's static directory, with its
// licence in the header. Run by `npm run build` (after `npm ci`), i.e. `make dashboard-assets`.
// The copies are committed, so installing the dashboard needs no Node; a test checks they match
// the version package-lock.json pins.
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const pkg = join(here, "node_modules", "uplot");
const { version, license } = JSON.parse(readFileSync(join(pkg, "package.json"), "utf8"));
const copyright = readFileSync(join(pkg, "LICENSE"), "utf8").split("\n").find((l) => l.startsWith("Copyright"));
const header = `/*! uPlot v${version} (npm package uplot) | ${license} License | ${copyright} */\n`;
const out = join(here, "..", "workhive_dashboard", "static");

for (const [from, to] of [["uPlot.iife.min.js", "uplot.min.js"], ["uPlot.min.css", "uplot.min.css"]]) {
  writeFileSync(join(out, to), header + readFileSync(join(pkg, "dist", from), "utf8"));
  console.log(`static/${to}: uPlot ${version}`);
}
