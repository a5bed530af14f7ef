// Validates Kubernetes objects (a JSON array, the file given) against the
// Kubernetes API schemas offline, with the npm packages kubernetes-models
// and @kubernetes-models/prometheus-operator (ES modules: the test copies
// this file into the directory it installed them in). Prints one line per
// object; exits 1 if any is invalid or of a kind it does not know.
import { readFileSync } from "node:fs";

// apiVersion/kind -> the module exporting its class.
const modules = {
  "v1": "kubernetes-models/v1",
  "apps/v1": "kubernetes-models/apps/v1",
  "policy/v1": "kubernetes-models/policy/v1",
  "batch/v1": "kubernetes-models/batch/v1",
  "monitoring.coreos.com/v1": "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1",
};

let bad = 0;
for (const obj of JSON.parse(readFileSync(process.argv[2], "utf8"))) {
  const name = `${obj.apiVersion} ${obj.kind} ${obj.metadata && obj.metadata.name}`;
  const mod = modules[obj.apiVersion];
  const Kind = mod && (await import(mod))[obj.kind];
  if (!Kind) {
    console.log(`${name}: no schema known`);
    bad++;
    continue;
  }
  try {
    new Kind(obj).validate();
    console.log(`${name}: valid`);
  } catch (e) {
    console.log(`${name}: ${e.message}`);
    bad++;
  }
}
process.exit(bad ? 1 : 0);
