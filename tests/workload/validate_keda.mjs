// Validates KEDA ScaledObjects with the validator @kubernetes-models/keda generates from KEDA's CRD.
// Usage: node validate_keda.mjs <node_modules dir>  < [{...ScaledObject...}, ...]
// Prints [[error, ...], ...] (one list per object); exits 1 when any object is invalid.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const modules = process.argv[2];
const module = await import(pathToFileURL(join(modules, "@kubernetes-models/keda/keda.sh/v1alpha1/ScaledObject.js")).href);
const results = JSON.parse(readFileSync(0, "utf8")).map((object) => {
  try {
    new module.ScaledObject(object).validate();
    return [];
  } catch (error) {
    return [String(error.message ?? error)];
  }
});
process.stdout.write(JSON.stringify(results));
process.exitCode = results.some((errors) => errors.length) ? 1 : 0;
