// The app calls onejob under /api, on its own origin: the dev and preview
// servers pass /api/… on to onejob (ONEJOB_URL, by default the address
// `onejob serve` listens on), so that no cross-origin request is made.
import { defineConfig } from "vite";

const onejob = process.env.ONEJOB_URL ?? "http://127.0.0.1:8080";
const proxy = {
  "/api": { target: onejob, changeOrigin: true, rewrite: (path: string) => path.replace(/^\/api/, "") },
};

export default defineConfig({
  server: { proxy },
  preview: { proxy },
});
