// Refusals render where they happen, in every mode.
//
// A view that refuses an htmx request (a 400 for bad input, 404 for a row gone, 409 for a state
// that changed) answers with the fragment of the region it concerns and names that region with
// HX-Retarget / HX-Reswap (django-htmx's retarget() / reswap()). Such an answer is swapped like
// a 200, whatever its status; under DEBUG, django-htmx's debug script would otherwise replace
// the whole document with it (it takes every 400/403/404/500 htmx answer for an error page).
document.addEventListener("DOMContentLoaded", () => {
  const isRefusal = (xhr) => xhr.status >= 400 && xhr.status < 500 &&
    (xhr.getResponseHeader("HX-Retarget") !== null || xhr.getResponseHeader("HX-Reswap") !== null);
  document.body.addEventListener("htmx:beforeOnLoad", (event) => {
    if (isRefusal(event.detail.xhr)) event.stopPropagation();  // before the debug script's listener on document
  });
  document.body.addEventListener("htmx:beforeSwap", (event) => {
    if (isRefusal(event.detail.xhr)) {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
    }
  });
});
