// MathJax 3 for attnflow's site: the LaTeX that pymdownx.arithmatex (generic mode) leaves in
// <span class="arithmatex">\(...\)</span> and <div class="arithmatex">\[...\]</div>, and the
// $...$ of the tutorial notebook's Markdown cells; nothing else on a page is read as maths.
// Loaded before MathJax itself (mkdocs.yml lists both), which the site serves (docs/hooks/offline_assets.py):
// the component tex-chtml, TeX input only (no MathML input, which would also read MathJax's own hidden
// MathML), CHTML output with MathJax's fonts.
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"], ["$", "$"]],
    displayMath: [["\\[", "\\]"], ["$$", "$$"]],
    processEscapes: true,
    processEnvironments: true,
  },
  options: {
    // every element with a class is skipped, and an element without one inherits its parent's choice:
    // so the paragraphs of a notebook's Markdown cell are read, and nothing outside the two classes is
    ignoreHtmlClass: ".+",
    processHtmlClass: "arithmatex|jp-RenderedMarkdown",
  },
  chtml: { displayOverflow: "scroll" },
};

// Material's instant loading swaps pages without reloading scripts: typeset each new page. Not the first
// one, which MathJax's startup typesets: typesetting it again would find nothing new, and with MathJax's
// MathML input it would typeset the hidden MathML that MathJax writes beside each formula a second time
if (typeof document$ !== "undefined") {
  let first = true;
  document$.subscribe(() => {
    if (first) {
      first = false;
      return;
    }
    if (window.MathJax && MathJax.typesetPromise) {
      MathJax.startup.output.clearCache();
      MathJax.typesetClear();
      MathJax.texReset();
      MathJax.typesetPromise();
    }
  });
}
