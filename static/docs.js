// Swagger UI for /openapi.json: everything from this origin, no validator badge (it would call out).
(function () {
  "use strict";
  var root = document.getElementById("swagger-ui");
  if (!root || typeof SwaggerUIBundle !== "function") return;
  SwaggerUIBundle({
    url: root.getAttribute("data-spec"),
    dom_id: "#swagger-ui",
    deepLinking: true,
    validatorUrl: null,
    tryItOutEnabled: true,
  });
})();
