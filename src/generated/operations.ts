// DO NOT EDIT. Per-operation JSON schemas and route config (scopes, or public), generated from openapi/openapi.yaml by `npm run generate`.
export const operations = {
  "listClientPermissions": {
    "operationId": "listClientPermissions",
    "method": "GET",
    "path": "/resources/{resource_id}/authorized_clients/{client_id}/permissions",
    "url": "/resources/:resource_id/authorized_clients/:client_id/permissions",
    "config": {
      "scopes": [
        "read:resource"
      ]
    },
    "statuses": [
      200,
      304,
      400,
      401,
      403,
      404,
      408,
      412,
      431,
      500,
      503
    ],
    "schema": {
      "params": {
        "type": "object",
        "properties": {
          "resource_id": {
            "type": "string",
            "minLength": 1,
            "maxLength": 255,
            "pattern": "^(?!\\.\\.?$)(?:[^\\u0000\\uD800-\\uDFFF]|[\\uD800-\\uDBFF][\\uDC00-\\uDFFF])+$",
            "x-pattern-hint": "text without NUL characters or unpaired surrogates, other than . and .."
          },
          "client_id": {
            "type": "string",
            "minLength": 1,
            "maxLength": 255,
            "pattern": "^(?!\\.\\.?$)(?:[^\\u0000\\uD800-\\uDFFF]|[\\uD800-\\uDBFF][\\uDC00-\\uDFFF])+$",
            "x-pattern-hint": "text without NUL characters or unpaired surrogates, other than . and .."
          }
        },
        "required": [
          "resource_id",
          "client_id"
        ]
      },
      "querystring": {
        "type": "object",
        "properties": {
          "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": 500,
            "default": 50
          },
          "offset": {
            "type": "integer",
            "minimum": 0,
            "maximum": 99999999999999,
            "default": 0
          },
          "sort_by": {
            "type": "string",
            "default": "name.asc",
            "maxLength": 100,
            "pattern": "^(id|name|description)(\\.(asc|desc))?(,(id|name|description)(\\.(asc|desc))?)*$",
            "x-pattern-hint": "comma-separated sort keys, each id, name or description, optionally followed by .asc or .desc (for example name.desc,id)"
          }
        },
        "additionalProperties": false
      },
      "headers": {
        "type": "object",
        "properties": {
          "if-match": {
            "type": "string",
            "description": "`*` or a list of entity-tags (RFC 9110 §8.8.3, §13.1.1), as If-Match and If-None-Match take.",
            "maxLength": 8192,
            "pattern": "^(?:\\*|(?:,[\\t ]*)*(?:W/)?\"[\\x21\\x23-\\x7E\\x80-\\xFF]*\"(?:[\\t ]*,(?:[\\t ]*(?:W/)?\"[\\x21\\x23-\\x7E\\x80-\\xFF]*\")?)*)$",
            "x-pattern-hint": "* or a comma-separated list of entity-tags in double quotes, such as \"1042\" or W/\"1042\""
          },
          "if-none-match": {
            "type": "string",
            "description": "`*` or a list of entity-tags (RFC 9110 §8.8.3, §13.1.1), as If-Match and If-None-Match take.",
            "maxLength": 8192,
            "pattern": "^(?:\\*|(?:,[\\t ]*)*(?:W/)?\"[\\x21\\x23-\\x7E\\x80-\\xFF]*\"(?:[\\t ]*,(?:[\\t ]*(?:W/)?\"[\\x21\\x23-\\x7E\\x80-\\xFF]*\")?)*)$",
            "x-pattern-hint": "* or a comma-separated list of entity-tags in double quotes, such as \"1042\" or W/\"1042\""
          },
          "consistency-token": {
            "type": "string",
            "maxLength": 17,
            "pattern": "^[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$",
            "x-pattern-hint": "a Consistency-Token as an earlier answer gave it"
          }
        }
      },
      "response": {
        "200": {
          "type": "array",
          "maxItems": 500,
          "items": {
            "type": "object",
            "additionalProperties": false,
            "required": [
              "id",
              "name"
            ],
            "properties": {
              "id": {
                "type": "string",
                "minLength": 1,
                "maxLength": 255,
                "pattern": "^(?:[^\\u0000\\uD800-\\uDFFF]|[\\uD800-\\uDBFF][\\uDC00-\\uDFFF])+$",
                "x-pattern-hint": "text without NUL characters or unpaired surrogates",
                "description": "The `id` of a Permission.",
                "examples": [
                  "perm_read_orders"
                ]
              },
              "name": {
                "type": "string",
                "description": "Unique within its resource; a verb and a noun separated by a colon, no spaces.",
                "minLength": 3,
                "maxLength": 255,
                "pattern": "^[^\\s:]+:[^\\s:]+$",
                "examples": [
                  "read:orders"
                ]
              },
              "description": {
                "type": "string",
                "description": "Additional information about the permission.",
                "maxLength": 255,
                "examples": [
                  "Read orders"
                ]
              }
            }
          }
        }
      }
    }
  },
  "grantClientPermissions": {
    "operationId": "grantClientPermissions",
    "method": "POST",
    "path": "/resources/{resource_id}/authorized_clients/{client_id}/permissions",
    "url": "/resources/:resource_id/authorized_clients/:client_id/permissions",
    "config": {
      "scopes": [
        "create:resource"
      ]
    },
    "statuses": [
      204,
      400,
      401,
      403,
      404,
      408,
      412,
      413,
      415,
      422,
      431,
      500,
      503
    ],
    "schema": {
      "params": {
        "type": "object",
        "properties": {
          "resource_id": {
            "type": "string",
            "minLength": 1,
            "maxLength": 255,
            "pattern": "^(?!\\.\\.?$)(?:[^\\u0000\\uD800-\\uDFFF]|[\\uD800-\\uDBFF][\\uDC00-\\uDFFF])+$",
            "x-pattern-hint": "text without NUL characters or unpaired surrogates, other than . and .."
          },
          "client_id": {
            "type": "string",
            "minLength": 1,
            "maxLength": 255,
            "pattern": "^(?!\\.\\.?$)(?:[^\\u0000\\uD800-\\uDFFF]|[\\uD800-\\uDBFF][\\uDC00-\\uDFFF])+$",
            "x-pattern-hint": "text without NUL characters or unpaired surrogates, other than . and .."
          }
        },
        "required": [
          "resource_id",
          "client_id"
        ]
      },
      "querystring": {
        "type": "object",
        "properties": {},
        "additionalProperties": false
      },
      "headers": {
        "type": "object",
        "properties": {
          "if-match": {
            "type": "string",
            "description": "`*` or a list of entity-tags (RFC 9110 §8.8.3, §13.1.1), as If-Match and If-None-Match take.",
            "maxLength": 8192,
            "pattern": "^(?:\\*|(?:,[\\t ]*)*(?:W/)?\"[\\x21\\x23-\\x7E\\x80-\\xFF]*\"(?:[\\t ]*,(?:[\\t ]*(?:W/)?\"[\\x21\\x23-\\x7E\\x80-\\xFF]*\")?)*)$",
            "x-pattern-hint": "* or a comma-separated list of entity-tags in double quotes, such as \"1042\" or W/\"1042\""
          },
          "if-none-match": {
            "type": "string",
            "description": "`*` or a list of entity-tags (RFC 9110 §8.8.3, §13.1.1), as If-Match and If-None-Match take.",
            "maxLength": 8192,
            "pattern": "^(?:\\*|(?:,[\\t ]*)*(?:W/)?\"[\\x21\\x23-\\x7E\\x80-\\xFF]*\"(?:[\\t ]*,(?:[\\t ]*(?:W/)?\"[\\x21\\x23-\\x7E\\x80-\\xFF]*\")?)*)$",
            "x-pattern-hint": "* or a comma-separated list of entity-tags in double quotes, such as \"1042\" or W/\"1042\""
          },
          "consistency-token": {
            "type": "string",
            "maxLength": 17,
            "pattern": "^[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$",
            "x-pattern-hint": "a Consistency-Token as an earlier answer gave it"
          }
        }
      },
      "body": {
        "type": "array",
        "minItems": 1,
        "maxItems": 500,
        "items": {
          "type": "string",
          "minLength": 1,
          "maxLength": 255,
          "pattern": "^(?:[^\\u0000\\uD800-\\uDFFF]|[\\uD800-\\uDBFF][\\uDC00-\\uDFFF])+$",
          "x-pattern-hint": "text without NUL characters or unpaired surrogates",
          "description": "The `id` of a Permission.",
          "examples": [
            "perm_read_orders"
          ]
        }
      }
    }
  },
  "unauthorizeClientPermissions": {
    "operationId": "unauthorizeClientPermissions",
    "method": "DELETE",
    "path": "/resources/{resource_id}/authorized_clients/{client_id}/permissions",
    "url": "/resources/:resource_id/authorized_clients/:client_id/permissions",
    "config": {
      "scopes": [
        "delete:resource"
      ]
    },
    "statuses": [
      204,
      400,
      401,
      403,
      404,
      408,
      412,
      413,
      415,
      422,
      431,
      500,
      503
    ],
    "schema": {
      "params": {
        "type": "object",
        "properties": {
          "resource_id": {
            "type": "string",
            "minLength": 1,
            "maxLength": 255,
            "pattern": "^(?!\\.\\.?$)(?:[^\\u0000\\uD800-\\uDFFF]|[\\uD800-\\uDBFF][\\uDC00-\\uDFFF])+$",
            "x-pattern-hint": "text without NUL characters or unpaired surrogates, other than . and .."
          },
          "client_id": {
            "type": "string",
            "minLength": 1,
            "maxLength": 255,
            "pattern": "^(?!\\.\\.?$)(?:[^\\u0000\\uD800-\\uDFFF]|[\\uD800-\\uDBFF][\\uDC00-\\uDFFF])+$",
            "x-pattern-hint": "text without NUL characters or unpaired surrogates, other than . and .."
          }
        },
        "required": [
          "resource_id",
          "client_id"
        ]
      },
      "querystring": {
        "type": "object",
        "properties": {},
        "additionalProperties": false
      },
      "headers": {
        "type": "object",
        "properties": {
          "if-match": {
            "type": "string",
            "description": "`*` or a list of entity-tags (RFC 9110 §8.8.3, §13.1.1), as If-Match and If-None-Match take.",
            "maxLength": 8192,
            "pattern": "^(?:\\*|(?:,[\\t ]*)*(?:W/)?\"[\\x21\\x23-\\x7E\\x80-\\xFF]*\"(?:[\\t ]*,(?:[\\t ]*(?:W/)?\"[\\x21\\x23-\\x7E\\x80-\\xFF]*\")?)*)$",
            "x-pattern-hint": "* or a comma-separated list of entity-tags in double quotes, such as \"1042\" or W/\"1042\""
          },
          "if-none-match": {
            "type": "string",
            "description": "`*` or a list of entity-tags (RFC 9110 §8.8.3, §13.1.1), as If-Match and If-None-Match take.",
            "maxLength": 8192,
            "pattern": "^(?:\\*|(?:,[\\t ]*)*(?:W/)?\"[\\x21\\x23-\\x7E\\x80-\\xFF]*\"(?:[\\t ]*,(?:[\\t ]*(?:W/)?\"[\\x21\\x23-\\x7E\\x80-\\xFF]*\")?)*)$",
            "x-pattern-hint": "* or a comma-separated list of entity-tags in double quotes, such as \"1042\" or W/\"1042\""
          },
          "consistency-token": {
            "type": "string",
            "maxLength": 17,
            "pattern": "^[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$",
            "x-pattern-hint": "a Consistency-Token as an earlier answer gave it"
          }
        }
      },
      "body": {
        "type": "array",
        "minItems": 1,
        "maxItems": 500,
        "items": {
          "type": "string",
          "minLength": 1,
          "maxLength": 255,
          "pattern": "^(?:[^\\u0000\\uD800-\\uDFFF]|[\\uD800-\\uDBFF][\\uDC00-\\uDFFF])+$",
          "x-pattern-hint": "text without NUL characters or unpaired surrogates",
          "description": "The `id` of a Permission.",
          "examples": [
            "perm_read_orders"
          ]
        }
      }
    }
  },
  "listPermissionChanges": {
    "operationId": "listPermissionChanges",
    "method": "GET",
    "path": "/resources/{resource_id}/authorized_clients/{client_id}/permission_changes",
    "url": "/resources/:resource_id/authorized_clients/:client_id/permission_changes",
    "config": {
      "scopes": [
        "read:resource"
      ]
    },
    "statuses": [
      200,
      400,
      401,
      403,
      404,
      408,
      431,
      500,
      503
    ],
    "schema": {
      "params": {
        "type": "object",
        "properties": {
          "resource_id": {
            "type": "string",
            "minLength": 1,
            "maxLength": 255,
            "pattern": "^(?!\\.\\.?$)(?:[^\\u0000\\uD800-\\uDFFF]|[\\uD800-\\uDBFF][\\uDC00-\\uDFFF])+$",
            "x-pattern-hint": "text without NUL characters or unpaired surrogates, other than . and .."
          },
          "client_id": {
            "type": "string",
            "minLength": 1,
            "maxLength": 255,
            "pattern": "^(?!\\.\\.?$)(?:[^\\u0000\\uD800-\\uDFFF]|[\\uD800-\\uDBFF][\\uDC00-\\uDFFF])+$",
            "x-pattern-hint": "text without NUL characters or unpaired surrogates, other than . and .."
          }
        },
        "required": [
          "resource_id",
          "client_id"
        ]
      },
      "querystring": {
        "type": "object",
        "properties": {
          "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": 500,
            "default": 50
          },
          "before": {
            "type": "string",
            "pattern": "^[0-9]{1,18}$",
            "x-pattern-hint": "the id of a change (up to 18 digits), as given in a previous page"
          }
        },
        "additionalProperties": false
      },
      "headers": {
        "type": "object",
        "properties": {
          "consistency-token": {
            "type": "string",
            "maxLength": 17,
            "pattern": "^[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$",
            "x-pattern-hint": "a Consistency-Token as an earlier answer gave it"
          }
        }
      },
      "response": {
        "200": {
          "type": "array",
          "maxItems": 500,
          "items": {
            "type": "object",
            "description": "One request that changed a client's grants on a resource.",
            "additionalProperties": false,
            "required": [
              "id",
              "at",
              "action",
              "permission_ids",
              "actor",
              "request_id"
            ],
            "properties": {
              "id": {
                "type": "string",
                "pattern": "^[0-9]{1,18}$",
                "description": "The cursor for `before`. Within one authorization's history, larger for each change applied after another; across histories, not the order of their commits (the change feed orders those, docs/change-feed.md).",
                "examples": [
                  "42"
                ]
              },
              "at": {
                "type": "string",
                "format": "date-time",
                "description": "When the change's transaction began (RFC 3339)."
              },
              "action": {
                "type": "string",
                "enum": [
                  "granted",
                  "unauthorized"
                ]
              },
              "permission_ids": {
                "type": "array",
                "minItems": 1,
                "maxItems": 500,
                "description": "The ids actually changed, in request order, each once.",
                "items": {
                  "type": "string",
                  "minLength": 1,
                  "maxLength": 255,
                  "pattern": "^(?:[^\\u0000\\uD800-\\uDFFF]|[\\uD800-\\uDBFF][\\uDC00-\\uDFFF])+$",
                  "x-pattern-hint": "text without NUL characters or unpaired surrogates",
                  "description": "The `id` of a Permission.",
                  "examples": [
                    "perm_read_orders"
                  ]
                }
              },
              "actor": {
                "type": "object",
                "additionalProperties": false,
                "description": "From the verified token; a claim the token did not carry is left out.",
                "properties": {
                  "sub": {
                    "type": "string",
                    "maxLength": 1024
                  },
                  "client_id": {
                    "type": "string",
                    "maxLength": 1024,
                    "description": "The token's `client_id`, or else its `azp`."
                  }
                }
              },
              "request_id": {
                "type": "string",
                "description": "The request's id (its `X-Request-Id`; the gateway's when sane)."
              }
            }
          }
        }
      }
    }
  },
  "listAllPermissionChanges": {
    "operationId": "listAllPermissionChanges",
    "method": "GET",
    "path": "/permission_changes",
    "url": "/permission_changes",
    "config": {
      "scopes": [
        "read:resource"
      ]
    },
    "statuses": [
      200,
      400,
      401,
      403,
      408,
      410,
      431,
      500,
      503
    ],
    "schema": {
      "querystring": {
        "type": "object",
        "properties": {
          "after": {
            "type": "string",
            "pattern": "^[0-9]{1,18}$",
            "x-pattern-hint": "the id of a change (up to 18 digits), as the feed or a history gave it"
          },
          "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": 500,
            "default": 50
          },
          "resource_id": {
            "type": "string",
            "minLength": 1,
            "maxLength": 255,
            "pattern": "^(?!\\.\\.?$)(?:[^\\u0000\\uD800-\\uDFFF]|[\\uD800-\\uDBFF][\\uDC00-\\uDFFF])+$",
            "x-pattern-hint": "text without NUL characters or unpaired surrogates, other than . and .."
          }
        },
        "additionalProperties": false
      },
      "headers": {
        "type": "object",
        "properties": {
          "last-event-id": {
            "type": "string",
            "pattern": "^[0-9]{1,18}$",
            "x-pattern-hint": "the id of a change (up to 18 digits), as the feed or a history gave it"
          },
          "consistency-token": {
            "type": "string",
            "maxLength": 17,
            "pattern": "^[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$",
            "x-pattern-hint": "a Consistency-Token as an earlier answer gave it"
          }
        }
      },
      "response": {
        "200": {
          "type": "array",
          "maxItems": 500,
          "items": {
            "type": "object",
            "description": "One entry of the change feed — a change of the history, with the resource and client it changed.",
            "additionalProperties": false,
            "required": [
              "id",
              "at",
              "resource_id",
              "client_id",
              "action",
              "permission_ids",
              "actor",
              "request_id"
            ],
            "properties": {
              "id": {
                "type": "string",
                "pattern": "^[0-9]{1,18}$",
                "description": "Increasing along the feed; the cursor for `after`.",
                "examples": [
                  "11456300564480"
                ]
              },
              "at": {
                "type": "string",
                "format": "date-time",
                "description": "When the change's transaction began (RFC 3339)."
              },
              "resource_id": {
                "type": "string",
                "minLength": 1,
                "maxLength": 255,
                "pattern": "^(?!\\.\\.?$)(?:[^\\u0000\\uD800-\\uDFFF]|[\\uD800-\\uDBFF][\\uDC00-\\uDFFF])+$",
                "x-pattern-hint": "text without NUL characters or unpaired surrogates, other than . and .."
              },
              "client_id": {
                "type": "string",
                "minLength": 1,
                "maxLength": 255,
                "pattern": "^(?!\\.\\.?$)(?:[^\\u0000\\uD800-\\uDFFF]|[\\uD800-\\uDBFF][\\uDC00-\\uDFFF])+$",
                "x-pattern-hint": "text without NUL characters or unpaired surrogates, other than . and .."
              },
              "action": {
                "type": "string",
                "enum": [
                  "granted",
                  "unauthorized"
                ]
              },
              "permission_ids": {
                "type": "array",
                "minItems": 1,
                "maxItems": 500,
                "description": "The ids actually changed, in request order, each once.",
                "items": {
                  "type": "string",
                  "minLength": 1,
                  "maxLength": 255,
                  "pattern": "^(?:[^\\u0000\\uD800-\\uDFFF]|[\\uD800-\\uDBFF][\\uDC00-\\uDFFF])+$",
                  "x-pattern-hint": "text without NUL characters or unpaired surrogates",
                  "description": "The `id` of a Permission.",
                  "examples": [
                    "perm_read_orders"
                  ]
                }
              },
              "actor": {
                "type": "object",
                "additionalProperties": false,
                "description": "From the verified token; a claim the token did not carry is left out.",
                "properties": {
                  "sub": {
                    "type": "string",
                    "maxLength": 1024
                  },
                  "client_id": {
                    "type": "string",
                    "maxLength": 1024,
                    "description": "The token's `client_id`, or else its `azp`."
                  }
                }
              },
              "request_id": {
                "type": "string",
                "description": "The request's id (its `X-Request-Id`; the gateway's when sane)."
              }
            }
          }
        }
      }
    }
  },
  "getLiveness": {
    "operationId": "getLiveness",
    "method": "GET",
    "path": "/healthz",
    "url": "/healthz",
    "config": {
      "public": true
    },
    "statuses": [
      200,
      400,
      408,
      431
    ],
    "schema": {
      "querystring": {
        "type": "object",
        "properties": {},
        "additionalProperties": false
      },
      "response": {
        "200": {
          "type": "object",
          "additionalProperties": false,
          "required": [
            "status"
          ],
          "properties": {
            "status": {
              "type": "string",
              "enum": [
                "ok"
              ]
            }
          }
        }
      }
    }
  },
  "getReadiness": {
    "operationId": "getReadiness",
    "method": "GET",
    "path": "/readyz",
    "url": "/readyz",
    "config": {
      "public": true
    },
    "statuses": [
      200,
      400,
      408,
      431,
      503
    ],
    "schema": {
      "querystring": {
        "type": "object",
        "properties": {},
        "additionalProperties": false
      },
      "response": {
        "200": {
          "type": "object",
          "additionalProperties": false,
          "required": [
            "status"
          ],
          "properties": {
            "status": {
              "type": "string",
              "enum": [
                "ok"
              ]
            }
          }
        }
      }
    }
  },
  "getProblemType": {
    "operationId": "getProblemType",
    "method": "GET",
    "path": "/problems/{name}",
    "url": "/problems/:name",
    "config": {
      "public": true
    },
    "statuses": [
      200,
      400,
      404,
      408,
      431
    ],
    "schema": {
      "params": {
        "type": "object",
        "properties": {
          "name": {
            "type": "string",
            "maxLength": 64,
            "pattern": "^[a-z]+(-[a-z]+)*$",
            "x-pattern-hint": "a problem type's name: lower-case words joined by hyphens, such as resource-not-found"
          }
        },
        "required": [
          "name"
        ]
      },
      "querystring": {
        "type": "object",
        "properties": {},
        "additionalProperties": false
      },
      "response": {
        "200": {
          "type": "object",
          "description": "A problem type: what `GET /problems/{name}` answers as JSON.",
          "additionalProperties": false,
          "required": [
            "type",
            "title",
            "status",
            "when",
            "what_to_do"
          ],
          "properties": {
            "type": {
              "type": "string",
              "format": "uri-reference",
              "description": "The `type` of the problems of this kind (and the URL of this page).",
              "examples": [
                "/problems/resource-not-found"
              ]
            },
            "title": {
              "type": "string",
              "description": "The `title` of the problems of this kind.",
              "examples": [
                "Resource not found"
              ]
            },
            "status": {
              "type": "integer",
              "minimum": 400,
              "maximum": 599,
              "description": "The HTTP status they are answered with.",
              "examples": [
                404
              ]
            },
            "when": {
              "type": "string",
              "description": "When it happens (CommonMark; names in backticks).",
              "examples": [
                "no resource has that id"
              ]
            },
            "what_to_do": {
              "type": "string",
              "description": "What the caller can do about it (CommonMark; names in backticks).",
              "examples": [
                "Check the resource id in the path: ids are compared exactly, case included."
              ]
            }
          }
        }
      }
    }
  }
} as const

export type OperationId = keyof typeof operations
