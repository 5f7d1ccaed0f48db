import cf from 'cloudfront';

// CloudFront Function (viewer request) on /v1/stream/*: a stream keeps one URL, but the stream
// function only reads. Writes (PUT, POST, DELETE, PATCH) go to the API function, which serves
// the same protocol, and so does every request to the protocol's reserved subscription section
// (/v1/stream/__ds/...), with the viewer's host in x-forwarded-host: subscriptions' callback and
// JWKS URLs must name this distribution, not the origin. The template inlines this file
// (infra/check.py checks they match and runs it in Node).

function handler(event) {
  var request = event.request;
  var method = request.method;
  var control = request.uri.indexOf('/v1/stream/__ds/') === 0;
  if (control || (method !== 'GET' && method !== 'HEAD' && method !== 'OPTIONS')) {
    cf.selectRequestOriginById('api');
  }
  if (control && request.headers.host) {
    request.headers['x-forwarded-host'] = { value: request.headers.host.value };
  }
  return request;
}
