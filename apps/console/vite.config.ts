// Vite builds the console to dist/ at package build time: hashed file names (cached for good by
// the gateway), no inline script (CSP), no module-preload polyfill (it would be inline).
import { defineConfig } from 'vite';

export default defineConfig({
  base: './',
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    target: 'es2022',
    modulePreload: { polyfill: false },
    assetsInlineLimit: 0,
    reportCompressedSize: true,
    chunkSizeWarningLimit: 800, // one bundle: xterm.js, marked, DOMPurify and jsdiff (~140 kB gzipped)
  },
});
