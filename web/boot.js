// The page's start, as a file: `hopfuse serve`'s Content-Security-Policy allows no inline script
// (runner/src/serve/middleware.rs). A classic script in <head>, so the theme is set before the
// first paint (the page keeps it in sync afterwards); the playground's wasm starts once the
// document is parsed, as the module script this replaces did.
try {
  const t = localStorage.getItem("hopfuse.theme");
  if (t === "dark" || (!t && matchMedia("(prefers-color-scheme: dark)").matches)) {
    document.documentElement.classList.add("dark");
  }
} catch (e) {}
document.addEventListener("DOMContentLoaded", () => {
  import("./hopfuse_web.js").then((glue) => glue.default());
});
