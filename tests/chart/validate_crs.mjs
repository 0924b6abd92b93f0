// Validates custom resources with the validators that @kubernetes-models/* generate from the
// prometheus-operator and cert-manager API types.
// Usage: node validate_crs.mjs <node_modules dir>  < [{"label": ..., "object": {...}}, ...]
// Prints [{"label", "kind", "name", "errors": [...]}]; exits 1 when any object is invalid.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const modules = process.argv[2];
const models = {
  "monitoring.coreos.com/v1/ServiceMonitor": "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor.js",
  "monitoring.coreos.com/v1/PrometheusRule": "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule.js",
  "cert-manager.io/v1/Certificate": "@kubernetes-models/cert-manager/cert-manager.io/v1/Certificate.js",
  "cert-manager.io/v1/Issuer": "@kubernetes-models/cert-manager/cert-manager.io/v1/Issuer.js",
  "cert-manager.io/v1/ClusterIssuer": "@kubernetes-models/cert-manager/cert-manager.io/v1/ClusterIssuer.js",
};

const items = JSON.parse(readFileSync(0, "utf8"));
const results = [];
for (const { label, object } of items) {
  const key = `${object.apiVersion}/${object.kind}`;
  const result = { label, kind: object.kind, name: object.metadata?.name, errors: [] };
  if (!(key in models)) {
    result.errors.push(`no validator for ${key}`);
  } else {
    const module = await import(pathToFileURL(join(modules, models[key])).href);
    const Model = module[object.kind];
    try {
      new Model(object).validate();
    } catch (error) {
      result.errors.push(String(error.message ?? error));
    }
  }
  results.push(result);
}
process.stdout.write(JSON.stringify(results));
process.exitCode = results.some((r) => r.errors.length) ? 1 : 0;
